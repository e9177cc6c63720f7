"""How the guardian finds and force-removes containers, per engine.

Each backend answers two questions, and nothing else:
- `find(session, names)`: the containers labelled `sprawl.session=<session>` or named one of
  `names` (a create may have been announced and never labelled, or labelled by another
  version of the arm: either way it is ours);
- `remove(refs)`: force-remove them (ids or names), skipping ones already gone; returns what
  the engine said for the ones it could not remove.

Docker goes through its CLI by default. `benchmarks/guardian.py` measured both, interleaved
in one run (docker 20.10, 3 running containers, 15 kills each, SIGKILL to last gone): SDK
median ~290 ms, CLI ~340 ms -- the daemon's kill + remove dominates (a live process's own
`docker rm -f` takes ~280 ms), and one `docker rm -f a b c` already removes in parallel. The
SDK's ~50 ms is one CLI start; it costs the guardian ~300 ms of CPU to import, paid at every
session's first command, exactly while the orchestrator syncs and creates, for a gain only a
crash sees. `--docker-via sdk` keeps it available. Podman here is daemonless (no API
socket), so its backend is its CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.host_which import host_which
from sprawl_orch.engines.engine import run_cli

LABEL = "sprawl.session"
CLI_TIMEOUT = 30.0


@dataclass(frozen=True)
class Found:
    container_id: str
    name: str


class ReaperEngine(Protocol):
    """An engine as the guardian uses it: find a session's containers, remove them. (Running
    commands is container.engine.ContainerEngine; making images, images.engines.ImageEngine.)"""

    name: str

    def find(self, session: str, names: Collection[str]) -> list[Found]: ...

    def remove(self, refs: Collection[str]) -> list[str]: ...


def _ours(labels: object, names: Sequence[str], session: str, wanted: Collection[str]) -> bool:
    if isinstance(labels, dict) and labels.get(LABEL) == session:
        return True
    return any(n in wanted for n in names)


class EngineError(Exception):
    """The engine could not be asked (down, missing binary, timeout)."""


def _run(engine: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """The engine's CLI through the one runner (container.engine.run_cli); the exit status is
    the caller's to judge, an engine that could not be asked is EngineError."""
    try:
        return run_cli(engine, argv, os.environ, timeout=CLI_TIMEOUT, check=False)
    except SprawlError as err:
        raise EngineError(f"{err.subject}: {err.detail}") from err


class DockerSDK:
    name = "docker"

    def __init__(self) -> None:
        # Imported here, not at module import: ~200 ms, paid while the orchestrator lives.
        import docker

        self._errors = docker.errors
        # from_env honours DOCKER_HOST (inherited from the orchestrator); version "auto"
        # asks the daemon once, now, so an unreachable daemon falls back to the CLI.
        self._api: Any = docker.from_env(timeout=int(CLI_TIMEOUT)).api

    def find(self, session: str, names: Collection[str]) -> list[Found]:
        try:
            listed = self._api.containers(all=True)
        except Exception as err:
            raise EngineError(f"docker: {err}") from err
        found = []
        for item in listed:
            own = [n.lstrip("/") for n in item.get("Names") or []]
            if _ours(item.get("Labels"), own, session, names):
                found.append(Found(item["Id"], own[0] if own else item["Id"]))
        return found

    def _remove_one(self, ref: str) -> str | None:
        try:
            self._api.remove_container(ref, force=True)
        except self._errors.NotFound:
            return None
        except Exception as err:
            return f"{ref}: {err}"
        return None

    def remove(self, refs: Collection[str]) -> list[str]:
        if not refs:
            return []
        with ThreadPoolExecutor(max_workers=min(16, len(refs))) as pool:
            return [e for e in pool.map(self._remove_one, refs) if e]


class DockerCLI:
    name = "docker"

    def __init__(self, binary: str = "docker") -> None:
        self.binary = binary

    def find(self, session: str, names: Collection[str]) -> list[Found]:
        done = _run(
            self.name,
            [
                self.binary,
                "ps",
                "-a",
                "--no-trunc",
                "--format",
                '{{.ID}}\t{{.Names}}\t{{.Label "' + LABEL + '"}}',
            ],
        )
        if done.returncode != 0:
            raise EngineError(f"docker ps: {done.stderr.strip()}")
        found = []
        for line in done.stdout.splitlines():
            cid, own, label = [*line.split("\t"), "", ""][:3]
            names_here = own.split(",") if own else []
            if _ours({LABEL: label}, names_here, session, names):
                found.append(Found(cid, names_here[0] if names_here else cid))
        return found

    def remove(self, refs: Collection[str]) -> list[str]:
        if not refs:
            return []
        try:
            done = _run(self.name, [self.binary, "rm", "-f", *refs])
        except EngineError as err:
            return [f"docker rm: {err}"]
        return [
            line
            for line in done.stderr.splitlines()
            if line.strip() and "No such container" not in line
        ]


class PodmanCLI:
    name = "podman"

    def __init__(self, binary: str = "podman") -> None:
        self.binary = binary

    def find(self, session: str, names: Collection[str]) -> list[Found]:
        done = _run(self.name, [self.binary, "ps", "-a", "--format", "json"])
        if done.returncode != 0:
            raise EngineError(f"podman ps: {done.stderr.strip()}")
        try:
            listed = json.loads(done.stdout or "[]")
        except json.JSONDecodeError as err:
            raise EngineError(f"podman ps printed no JSON: {err}") from err
        found = []
        for item in listed or []:
            own = list(item.get("Names") or [])
            if _ours(item.get("Labels"), own, session, names):
                found.append(Found(item["Id"], own[0] if own else item["Id"]))
        return found

    def remove(self, refs: Collection[str]) -> list[str]:
        if not refs:
            return []
        # `-t 0`: podman's rm -f first *stops* with the container's stop timeout (10 s by
        # default; a `sleep` as PID 1 ignores SIGTERM, so "StopSignal SIGTERM failed to stop
        # container ... in 10 seconds, resorting to SIGKILL" -- podman 4.3.1). `-i`: a name
        # that is already gone is not an error. The OCI runtime (`--runtime runc`) need not be
        # repeated: podman stores it with each container.
        try:
            done = _run(self.name, [self.binary, "rm", "-f", "-t", "0", "-i", *refs])
        except EngineError as err:
            return [f"podman rm: {err}"]
        if done.returncode == 0:
            return []
        return [line for line in done.stderr.splitlines() if line.strip()] or [
            f"podman rm exited {done.returncode}"
        ]


def open_engine(name: str, docker_via: str = "cli") -> ReaperEngine | None:
    """The backend for `name`, or None when its CLI is not installed here."""
    if name == "podman":
        binary = host_which("podman")
        return PodmanCLI(binary) if binary else None
    if name == "docker":
        if docker_via == "sdk":
            try:
                return DockerSDK()
            except Exception:
                pass  # no SDK or no reachable daemon config: the CLI can still say why
        binary = host_which("docker")
        return DockerCLI(binary) if binary else None
    raise ValueError(f"unknown engine {name!r} (docker, podman)")
