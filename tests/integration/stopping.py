"""Stopping a process for a test, for real: every thread of it, not just the signal sent."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil


def stop_whole(process: psutil.Process, within: float = 30.0) -> None:
    """SIGSTOP `process` and wait until every thread of it is stopped.

    kill(SIGSTOP) returns at once, and the group stop begins only when the one thread the
    kernel woke for the signal runs; until then the others run on. A prepared python guest's
    hand-off thread, blocked in recvmsg, took the next command and answered it before its main
    thread (runnable, or in a page fault, on a loaded machine) had stopped the process: the
    clean-clone CI of 2026-12-03 saw the command wait out its 600 s window in a stopped guest,
    and a CPU and disk load here repeated it in 1 module run of 8 (0.2-74 ms from the signal
    to every thread stopped, at load 8).
    """
    process.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{process.pid}/task"):
            stat = f"/proc/{process.pid}/task/{tid}/stat"
            # a thread that ended meanwhile is not among them
            with contextlib.suppress(FileNotFoundError), open(stat, "rb") as f:
                states.append(f.read().rpartition(b")")[2].split()[0])
        if states and all(state == b"T" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {process.pid} had not stopped {within} s after SIGSTOP")
