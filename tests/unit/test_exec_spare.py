"""The exec server's spare call process (cli/exec_spare.py), by the real program on copied_tree:

- the next call runs in the spare the server forked before the caller came;
- a spare forked before another call ended is not used (killed: the call is forked anew);
- no spare outlives its server: stopped, or SIGKILLed (the hand-off socket's EOF ends it);
- a call handed to a spare is run even when the spare's rehearsal failed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from sprawl_orch.cli import exec_spare
from tests.unit.test_exec_client import PROGRAM, env, program, tree

__all__ = ["env", "tree"]  # the fixtures, shared with test_exec_client


def _server(env: dict[str, str]) -> int:
    listed = program(["server", "status"], env)
    assert b" running" in listed.stdout, listed
    return int(listed.stdout.split(b"pid ")[1].split()[0])


def _spares(server: int, timeout: float = 30.0) -> list[int]:
    """The server's idle children: its spare. A running call has its command as a child; one
    that has just said its status may still be exiting for a moment, so only children seen
    idle on two looks 0.2 s apart count."""

    def waiting(p: psutil.Process) -> bool:
        try:  # the server's witness (exec_place.start_witness, a `cat`) is no spare
            return p.status() != "zombie" and not p.children() and p.name() != "cat"
        except psutil.NoSuchProcess:  # a call that ended between the listing and the look
            return False

    def idle() -> list[int]:
        return sorted(p.pid for p in psutil.Process(server).children() if waiting(p))

    deadline = time.monotonic() + timeout
    while True:
        first = idle()
        time.sleep(0.2)
        found = sorted(set(first) & set(idle()))
        if found or time.monotonic() > deadline:
            return found


def _gone(pids: list[int], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _caller_of_command(tree: Path, env: dict[str, str]) -> int:
    """The pid of the call's process: the command's parent (ionice and nice exec in place)."""
    done = program(["exec", "-C", str(tree), "--", "sh", "-c", "echo $PPID"], env)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout)


def test_the_next_call_runs_in_the_spare_forked_before_it(tree: Path, env: dict[str, str]) -> None:
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0
    server = _server(env)
    spares = _spares(server)
    assert len(spares) == 1, spares
    assert _caller_of_command(tree, env) == spares[0]
    # and a new one waits for the call after it
    assert _spares(server) not in ([], spares)


def test_a_spare_forked_before_another_call_ended_is_not_used(
    tree: Path, env: dict[str, str]
) -> None:
    """A call that ends after the spare's fork may have taught the server (memo, warm
    containers) what the spare never saw: that spare is killed, the next call runs in one
    forked after that end."""
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0
    server = _server(env)
    long = subprocess.Popen(
        [PROGRAM, "exec", "-C", str(tree), "--", "sleep", "3"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # a short call while the long one runs: at its end a spare is forked
        assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0
        (before,) = _spares(server)
        assert long.poll() is None, "the long call ended too soon for this test"
    finally:
        assert long.wait(timeout=60) == 0
    assert _gone([before]), "the spare forked before the long call ended was kept"
    caller = _caller_of_command(tree, env)
    assert caller != before


def test_no_spare_outlives_a_stopped_or_killed_server(tree: Path, env: dict[str, str]) -> None:
    for end in ("stop", "kill"):
        assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0
        server = _server(env)
        spares = _spares(server)
        assert spares, "no spare waited for the next call"
        if end == "stop":
            assert program(["server", "stop"], env).returncode == 0
        else:
            os.kill(server, signal.SIGKILL)
        assert _gone([server, *spares]), f"left after {end}: {spares}"


def test_a_call_handed_to_a_spare_whose_rehearsal_failed_is_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rehearsal only warms pages; a call handed while it ran is owed its run even when it
    fails (it reads a sprawl.toml at a fixed path of no one's: an invalid one there, or no
    memory, ended the spare with the caller's connection in its queue -- E_INTERNAL, 125)."""

    def failing() -> None:
        time.sleep(0.3)  # the call is handed meanwhile
        raise RuntimeError("the rehearsal failed")

    monkeypatch.setattr(exec_spare, "_rehearse", failing)
    told, tell = os.pipe()

    def run(conn: socket.socket, teach: int, keep: int) -> None:
        os.write(tell, b"ran")
        os._exit(0)

    spare = exec_spare.fork_spare(0, lambda: None, run)
    assert spare is not None
    ours, theirs = socket.socketpair()
    try:
        assert exec_spare.hand(spare, ours, told, told)
        _, status = os.waitpid(spare.pid, 0)
        os.close(tell)
        assert os.read(told, 16) == b"ran", f"the handed call was dropped (status {status})"
    finally:
        os.close(told)
        ours.close()
        theirs.close()
