"""The thin client and the per-user exec server (issue 26) on every arm: docker, podman,
linux_namespaces (bwrap) and copied_tree, by the real `sprawl-orch` program.

- a call through the server says and returns what the in-process CLI does;
- the lifeline: SIGKILL of the client ends the command, and a container is removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import holding as _holding
from tests.integration.test_exec_input import tree  # noqa: F401 -- the per-arm tree fixture

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SPRAWL_EXEC_SERVER_IDLE": "30"}


def test_a_call_through_the_server_is_the_in_process_one(
    tree: Path,  # noqa: F811
    env: dict[str, str],
) -> None:
    argv = [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", "echo out; echo err >&2; exit 9"]
    served = subprocess.run(argv, env=env, capture_output=True, timeout=240, check=False)
    local = subprocess.run(
        argv, env={**env, "SPRAWL_EXEC_SERVER": "0"}, capture_output=True, timeout=240, check=False
    )
    assert (served.returncode, served.stdout) == (local.returncode, local.stdout) == (9, b"out\n")
    assert served.stderr.splitlines()[0] == b"err"
    assert (
        served.stderr.splitlines()[1].split(b":")[:2]
        == local.stderr.splitlines()[1].split(b":")[:2]
    )
    assert b"exec server is not used" not in served.stderr


def _containers(token: str) -> list[str]:
    left = []
    for engine in ("docker", "podman"):
        if shutil.which(engine) is None:
            continue
        done = subprocess.run(
            [engine, "ps", "--all", "--no-trunc", "--format", "{{.Command}}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        left += [line for line in done.stdout.splitlines() if token in line]
    return left


def test_sigkill_of_the_client_ends_the_command_and_removes_its_container(
    tree: Path,  # noqa: F811
    env: dict[str, str],
) -> None:
    token = f"lifeline-{secrets.token_hex(6)}"
    client = subprocess.Popen(
        [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", "echo started; sleep 300", token],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert client.stdout is not None
    assert client.stdout.readline() == b"started\n"
    assert _holding(token), "the command runs somewhere this host can see"
    os.kill(client.pid, signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 60
    while _holding(token) or _containers(token):
        assert time.monotonic() < deadline, (_holding(token), _containers(token))
        time.sleep(0.1)
