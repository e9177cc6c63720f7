"""The engine CLIs run on the host with a fixed environment of ours, never the host's or the
command's (issue 30, attack3: the tree's LD_PRELOAD / LD_LIBRARY_PATH loaded into podman on the
host as root). The command's values go by --env-file, so `ContainerEngine.create` takes no env
(issue 28). Proven on a real process: a stand-in CLI records the environment it was run with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.engines.docker import CONNECTION_VARS as DOCKER_CONNECTION
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.podman import CONNECTION_VARS as PODMAN_CONNECTION
from sprawl_orch.engines.podman import PodmanEngine

# What an attacker shaping the host's environment would set (the tree's library, a secret, the
# loader's tunables and a proxy), beside the names that tell the CLI which engine to reach.
HOSTILE = {
    "LD_PRELOAD": "/tree/evil.so",
    "LD_LIBRARY_PATH": "/tree:",
    "GLIBC_TUNABLES": "glibc.malloc.check=3",
    "AWS_SECRET_ACCESS_KEY": "hunter2",
    "HTTPS_PROXY": "http://user:pass@127.0.0.1:9",
    "TMPDIR": "/tree",
}
# /bin/sh adds its working directory to what it exports; that is the stand-in's, not ours.
SHELL_ADDS = {"PWD"}


def stand_in(tmp_path: Path) -> tuple[str, Path]:
    """A CLI that writes the environment it got, one NAME=value a line, and prints an ID."""
    seen = tmp_path / "env.txt"
    cli = tmp_path / "cli"
    cli.write_text(f'#!/bin/sh\nenv > "{seen}"\necho "c0ffee"\n')
    cli.chmod(0o755)
    return str(cli), seen


def recorded(seen: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs if k not in SHELL_ADDS}


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_create_runs_the_cli_with_our_fixed_env_only(engine: str, tmp_path: Path) -> None:
    cli, seen = stand_in(tmp_path)
    environ = {
        "PATH": os.defpath,
        "HOME": str(tmp_path),
        "DOCKER_HOST": "unix:///nowhere.sock",
        "XDG_RUNTIME_DIR": str(tmp_path),
        **HOSTILE,
    }
    backend = (
        DockerEngine(cli=cli, environ=environ)
        if engine == "docker"
        else PodmanEngine(cli=cli, environ=environ)
    )
    assert backend.create(["create", "busybox"]) == "c0ffee"
    got = recorded(seen)
    assert got == backend.cli_env()
    assert set(got).isdisjoint(HOSTILE), "the host's environment reached the engine CLI"
    allowed = (
        {*DOCKER_CONNECTION, "DOCKER_HOST", "HOME"} if engine == "docker" else {*PODMAN_CONNECTION}
    )
    assert set(got) <= allowed, sorted(set(got) - allowed)
    # the connection it was given is the one it keeps
    if engine == "docker":
        assert got["DOCKER_HOST"] == "unix:///nowhere.sock"
    else:
        assert got["XDG_RUNTIME_DIR"] == str(tmp_path)


def test_the_process_environment_does_not_leak_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Built from os.environ (the default), as the container arm and the guardian build them.
    cli, seen = stand_in(tmp_path)
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)
    for backend in (DockerEngine(cli=cli), PodmanEngine(cli=cli)):
        backend.create(["create", "busybox"])
        assert set(recorded(seen)).isdisjoint(HOSTILE), backend.name
