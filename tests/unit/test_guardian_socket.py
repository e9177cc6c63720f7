"""Where the shared guardian listens (state.guardian_socket): one per state directory,
engine environment and guardian code; a private directory when the path is too long."""

from __future__ import annotations

import os
from pathlib import Path

from sprawl_orch.config.state import SOCKET_PATH_MAX, guardian_socket

CODE = Path("/src/guardian")


def test_one_socket_per_engine_environment_and_code(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": "unix:///run/a.sock", "PATH": "/bin", "HOME": "/root"}
    first = guardian_socket(tmp_path / "state", env, CODE)
    assert first.parent == tmp_path / "state" and first.name.startswith("guardian-")
    assert guardian_socket(tmp_path / "state", {**env, "HOME": "/x"}, CODE) == first
    assert guardian_socket(tmp_path / "state", {**env, "DOCKER_HOST": "unix:///b"}, CODE) != first
    assert guardian_socket(tmp_path / "state", env, Path("/other/guardian")) != first
    assert oct((tmp_path / "state").stat().st_mode & 0o777) == "0o700"


def test_a_state_path_too_long_for_a_socket_uses_a_private_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120) / "state"
    sock = guardian_socket(deep, {}, CODE)
    assert len(os.fsencode(sock)) <= SOCKET_PATH_MAX + 40
    assert sock.parent.name == f"sprawl-orch-{os.geteuid()}"
    assert oct(sock.parent.stat().st_mode & 0o777) == "0o700"
    assert sock != guardian_socket(tmp_path / ("e" * 120) / "state", {}, CODE)
