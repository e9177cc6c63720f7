"""Waiting for the python arm's runtime process to say it is ready, bounded (issue 31).

A tool (or a call the exec server serves) hands the runtime (wasi_runtime.py) a stream and
waits for `{"ready": PID}`, which the runtime sends only once wasmtime is imported and the
module mapped (~1 s quiet). A runtime that started and then said nothing -- stopped, wedged
in its start -- held every command waiting on it forever. connect waits READY_SECONDS, pushed
on while a compile runs (the runtime's start competes with it for the CPU, and a cold compile
takes ~6 s quiet and far more under load: that wait is not cut); past it the caller
(wasi_forked.Runtime) kills that runtime and fails the command with stuck_error, and the next
command starts a fresh one.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.native_fallbacks import wasi_runtime

READY_SECONDS = 30.0  # a started runtime's start is ~1 s quiet, a few under load
STUCK = "python-runtime-stuck"


class NotReady(Exception):
    """The runtime took the stream but said nothing within the bound."""

    def __init__(self, waited: float) -> None:
        super().__init__(f"no answer in {waited:.1f} s")
        self.waited = waited


def stuck_error(pid: int, waited: float, log: Path) -> SprawlError:
    return SprawlError(
        ErrorCode.TOOL_UNAVAILABLE,
        STUCK,
        f"the python arm's runtime process (pid {pid}) was started but said nothing in "
        f"{waited:.1f} s (the bound: {READY_SECONDS:g} s, longer while a compile ran); it was "
        "killed",
        "run the command again: the next one starts a fresh runtime. If it happens again, "
        f"see {log} and reinstall the runtime: pip install 'sprawl-orch[python]'",
    )


def connect(door: socket.socket, compiling: Callable[[], bool] = lambda: False) -> socket.socket:
    """A stream of our own to the runtime behind `door`, once it is ready (it answers only
    after loading the module). ConnectionError: it ended, or (the message) refused; NotReady:
    no answer READY_SECONDS after the last moment `compiling()` was true (looked at each
    second: a compile elsewhere slows the runtime's start, it does not wedge it)."""
    ours, theirs = socket.socketpair()
    start = time.monotonic()
    deadline = start + READY_SECONDS
    try:
        try:
            socket.send_fds(door, [b"c"], [theirs.fileno()])
        finally:
            # ours no more: a runtime that dies before taking it drops it, and we see EOF
            theirs.close()
        # poll, not select: a serve session's descriptors can pass select's 1024
        answered = select.poll()
        answered.register(ours, select.POLLIN)
        while not answered.poll(max(0, min(1000, int((deadline - time.monotonic()) * 1000)))):
            now = time.monotonic()
            if compiling():
                deadline = now + READY_SECONDS
            elif now >= deadline:
                ours.close()
                raise NotReady(now - start)
        answer, _ = wasi_runtime.receive(ours)
    except OSError:  # the runtime is gone (EPIPE, ECONNRESET): said as EOF
        answer = None
    if answer is None or "ready" not in answer:
        ours.close()
        raise ConnectionError(answer.get("error", "") if answer else "")
    return ours
