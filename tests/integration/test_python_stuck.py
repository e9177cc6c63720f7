"""A python arm runtime that started but never says it is ready (issue 31): the wait is
bounded (native_fallbacks/wasi_ready.py), the runtime is killed, the command fails
E_TOOL_UNAVAILABLE (subject python-runtime-stuck, in the result and the ledger) and the next
command gets a fresh runtime -- for a tool's own runtime and for the one the exec server
holds (wasi_shared, driven here in-process as the server drives it). The runtime is real,
stopped with SIGSTOP right after it was spawned, so it can never answer; the bound is made
short here by setting wasi_ready.READY_SECONDS in this process only. Before the bound these
tests never ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch.core import served_memo
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.native_fallbacks import (
    wasi_forked,
    wasi_module,
    wasi_ready,
    wasi_runtime,
    wasi_shared,
)
from sprawl_orch.runs.ledger import Ledger
from tests.integration.test_python_arm import state, tool_for, tree

__all__ = ["state", "tree"]  # test_python_arm.py's fixtures, used here by name

pytestmark = pytest.mark.skipif(
    not wasi_forked.usable(), reason="the runtime process needs fork, sessions and pidfds"
)

BOUND = 2.0


@pytest.fixture
def stopped(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[psutil.Process]]:
    """The module compiled and run once first; then the next runtime spawned is stopped at
    once (it cannot answer its door), the ones after start as usual. Yields the stopped."""
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
    real = wasi_runtime.spawn
    held: list[psutil.Process] = []

    def spawn(
        door: object, module_fd: int, stderr: int, compiler: str = "cranelift"
    ) -> subprocess.Popen[bytes]:
        proc = real(door, module_fd, stderr, compiler)  # type: ignore[arg-type]
        if not held:
            os.kill(proc.pid, signal.SIGSTOP)
            held.append(psutil.Process(proc.pid))
        return proc

    monkeypatch.setattr(wasi_runtime, "spawn", spawn)
    monkeypatch.setattr(wasi_ready, "READY_SECONDS", BOUND)
    yield held
    for proc in held:  # never left stopped, whatever failed
        if proc.is_running():
            proc.kill()


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_runtime_that_never_is_ready_is_killed_and_the_next_gets_a_fresh_one(
    tree: Path, state: Path, stopped: list[psutil.Process]
) -> None:
    with tool_for(tree, state) as tool:
        result = tool.exec(["python", "-c", "print('first')"])
        assert result.outcome == "exceptional", result
        assert result.code == ErrorCode.TOOL_UNAVAILABLE
        assert result.subject == wasi_ready.STUCK
        (proc,) = stopped
        assert f"pid {proc.pid}" in str(result.detail) and "killed" in str(result.detail)
        assert f"{BOUND:g} s" in str(result.detail)
        assert "run the command again" in str(result.recovery)
        assert gone(proc)  # killed and reaped, not left stopped
        again = tool.exec(["python", "-c", "print('again')"])
        assert again.exit_code == 0, again
        assert again.stdout.strip() == "again"
    lines = [line for line in Ledger(state / "ledger.jsonl").read() if line.get("subject")]
    assert lines[-1]["subject"] == wasi_ready.STUCK, lines[-1]


def test_a_compile_in_progress_holds_the_bound_off(
    tree: Path, state: Path, stopped: list[psutil.Process]
) -> None:
    (entry,) = (state / "wasm-cache").glob("*/module.cwasm")
    held_for = 3 * BOUND
    # another process compiling into this entry: it holds the compile lock
    compiling = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(float(sys.argv[2]))\n",
            str(entry.parent / "compile.lock"),
            str(held_for),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert compiling.stdout is not None and compiling.stdout.readline() == "held\n"
        assert wasi_module.compile_in_progress(entry.parent)
        with tool_for(tree, state) as tool:
            result = tool.exec(["python", "-c", "pass"])
    finally:
        compiling.kill()
        compiling.wait()
    assert result.subject == wasi_ready.STUCK, result
    # waited past the lock's hold, not cut at the bound
    waited = float(str(result.detail).split("said nothing in ")[1].split(" s")[0])
    assert waited >= held_for, result.detail
    assert not wasi_module.compile_in_progress(entry.parent)


def test_a_stuck_shared_runtime_is_killed_and_replaced(
    tree: Path, state: Path, stopped: list[psutil.Process]
) -> None:
    try:
        # Asks left in this process by earlier python-arm tests (every call without a shared
        # runtime asks for one) are dropped first: after_call started their runtimes before
        # ours, and the first of them was the one stopped (CI: held 20613, stopped 20612).
        served_memo.take(wasi_shared.KIND)
        # as the exec server does between calls: a call asked, the server starts one
        wasi_shared.want(state)
        wasi_shared.after_call()
        (proc,) = stopped
        assert wasi_shared._held[str(state)].proc.pid == proc.pid
        with tool_for(tree, state) as tool:  # a served call: it finds the held runtime
            result = tool.exec(["python", "-c", "pass"])
        assert result.subject == wasi_ready.STUCK, result
        assert f"pid {proc.pid}" in str(result.detail)
        assert "shared.stderr" in str(result.recovery)
        # killed by the call (the server's child: a zombie until the server reaps it)
        assert gone(proc)
        wasi_shared.after_call()  # the server, after that call: reaped and replaced
        fresh = wasi_shared._held[str(state)].proc
        assert fresh.pid != proc.pid and fresh.poll() is None
        with tool_for(tree, state) as tool:
            again = tool.exec(["python", "-c", "print('again')"])
        assert again.stdout.strip() == "again", again
        assert wasi_shared._held[str(state)].proc.pid == fresh.pid
    finally:
        wasi_shared.close_all()
