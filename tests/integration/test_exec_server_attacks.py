"""Attacks on the per-user exec server (issue 26) that its own tests don't make, by the real
`sprawl-orch` program on the copied_tree arm (it runs the command in the server's own
context, so what the server keeps or lends shows in the command):

- a later caller's umask is its own, not the first caller's (which started the server);
- a caller confined beyond its uid (no_new_privs, no network namespace) keeps its
  confinement: the server of an unconfined caller does not run its command;
- a signal line the client never sends does not cut the lifeline;
- a call's process holds no other caller's connection.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sprawl_orch.core.exec_place import witness_proof
from tests.integration.conftest import holding as _holding
from tests.integration.conftest import missing
from tests.polling import until

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "scratch").mkdir()
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\nscratch_dir = "{tmp_path / "scratch"}"\narm = "copied_tree"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    return tree


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SPRAWL_EXEC_SERVER_IDLE": "30"}


def _exec(
    tree: Path, env: dict[str, str], script: str, *, prefix: tuple[str, ...] = (), umask: int = 0o22
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*prefix, PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", script],
        env=env,
        capture_output=True,
        timeout=240,
        check=False,
        preexec_fn=lambda: os.umask(umask),  # the test runs no threads: safe before exec
    )


def _servers(env: dict[str, str]) -> list[int]:
    place = Path(env["XDG_RUNTIME_DIR"]) / "sprawl-orch"
    return [int(lock.read_text()) for lock in place.glob("*.lock") if lock.read_text().strip()]


def test_a_later_caller_s_umask_is_its_own(tree: Path, env: dict[str, str]) -> None:
    first = _exec(tree, env, "umask", umask=0o000)
    assert (first.returncode, first.stdout) == (0, b"0000\n"), first.stderr
    later = _exec(tree, env, "umask", umask=0o077)
    assert b"exec server is not used" not in later.stderr
    assert (later.returncode, later.stdout) == (0, b"0077\n"), later.stderr
    for pid in _servers(env):
        assert os.readlink(f"/proc/{pid}/cwd") == "/"  # not the first caller's directory


def _confined(tree: Path, env: dict[str, str], prefix: tuple[str, ...]) -> bytes:
    script = "grep NoNewPrivs /proc/self/status; wc -l < /proc/net/dev"
    done = _exec(tree, env, script, prefix=prefix)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_confined_caller_stays_confined_through_the_server(
    tree: Path, env: dict[str, str]
) -> None:
    if shutil.which("setpriv") is None or shutil.which("unshare") is None:
        missing("setpriv and unshare (util-linux) are needed to confine a caller")
    if os.geteuid() != 0:
        missing("`unshare -n` needs root here")
    started = _exec(tree, env, "true")  # the server, started by an unconfined caller
    assert started.returncode == 0, started.stderr
    prefix = ("unshare", "-n", "setpriv", "--no-new-privs", "--")
    served = _confined(tree, env, prefix)
    local = _confined(tree, {**env, "SPRAWL_EXEC_SERVER": "0"}, prefix)
    assert local.split() == [b"NoNewPrivs:", b"1", b"3"]  # lo only, in its own namespace
    assert served == local


def _raw_call(env: dict[str, str], token: str) -> socket.socket:
    """A call made by hand, as the client makes it (its socket found by a first call)."""
    place = Path(env["XDG_RUNTIME_DIR"]) / "sprawl-orch"
    (path,) = place.glob("*.sock")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(path))
    header = {
        "op": "exec",
        "args": ["--", "sleep", token],
        "cwd": env["TREE"],
        "env": {k: v for k, v in env.items() if k != "TREE"},
        "umask": 0o22,
        "blocked": [],
        "ignored": [],
    }
    body = json.dumps(header).encode()
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        proof = witness_proof(path)  # the server's witness, as a client hands it over
        socket.send_fds(conn, [len(body).to_bytes(4, "big")], [devnull, devnull, devnull, proof])
        os.close(proof)
    finally:
        os.close(devnull)
    conn.sendall(body)
    return conn


def _token() -> str:
    """A sleep's argument no other process has: 300 s and a random fraction."""
    return f"300.{secrets.randbelow(10**9):09d}"


def _until(check: Callable[[], bool], within: float = 120.0) -> bool:
    # This module's waits are on exec servers and their commands: longer, polled less often.
    return until(check, within, every=0.05)


def test_an_unknown_signal_line_does_not_cut_the_lifeline(tree: Path, env: dict[str, str]) -> None:
    assert _exec(tree, env, "true").returncode == 0  # the server
    token = _token()
    conn = _raw_call({**env, "TREE": str(tree)}, token)
    assert _until(lambda: _holding(token))
    conn.sendall(b"S99999999999999999999999\n")
    time.sleep(0.2)  # lets the line reach the call; the wait below is on a condition
    conn.close()  # the client is gone: its command must end
    assert _until(lambda: not _holding(token), 60), "the command outlived its client"


def test_a_call_holds_no_other_caller_s_connection(tree: Path, env: dict[str, str]) -> None:
    assert _exec(tree, env, "true").returncode == 0  # the server
    (server,) = _servers(env)
    first, second = _token(), _token()
    calls = {**env, "TREE": str(tree)}
    a = _raw_call(calls, first)
    assert _until(lambda: _holding(first))
    b = _raw_call(calls, second)
    assert _until(lambda: _holding(second))
    try:
        import psutil

        # the server's witness (exec_place.start_witness) is no call
        children = [p for p in psutil.Process(server).children() if p.name() != "cat"]
        call_a = min(children, key=lambda p: p.create_time())
        # the server dies; then call A dies by a signal: A's caller learns it at once (EOF),
        # not when call B ends
        os.kill(server, signal.SIGKILL)
        call_a.kill()
        a.settimeout(30)
        assert a.recv(64) == b"", "call A's caller saw no EOF: another call holds its socket"
    finally:
        a.close()
        b.close()
    # B's caller left: its lifeline ends B's command. (A's call was SIGKILLed, as a killed
    # in-process CLI: its guardian ends A's command once announced; one killed in the instant
    # before the announcement is design 4's known window, seen once here under load -- not
    # this test's claim, so what is left of A is ended by the test.)
    assert _until(lambda: not _holding(second), 60), "B's command outlived its caller"
    if not _until(lambda: not _holding(first), 60):
        for pid in _holding(first):
            os.kill(pid, signal.SIGKILL)
