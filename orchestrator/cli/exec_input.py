"""`exec -i/-t` on the caller's side: what the command reads, and the caller's own terminal.

As `docker run -it`: with -t and -i on a terminal, the caller's terminal goes raw for the
command's life (every key, ^C included, goes to the command's new terminal, which does its
own line editing and echo) and comes back as it was, however the call ends; the window size
is the caller's at the start and follows it (SIGWINCH). The caller's terminal itself is
never given to the command (core/command_input.py says why).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import termios
import tty as ttymod
from collections.abc import Iterator
from types import FrameType
from typing import Any

from sprawl_orch.core.command_input import CommandInput, window_size


def _caller_size() -> tuple[int, int] | None:
    for fd in (1, 2, 0):
        size = window_size(fd)
        if size is not None:
            return size
    return None


def command_input(interactive: bool, tty: bool) -> CommandInput | None:
    """None for neither flag (stdin stays /dev/null)."""
    if not (interactive or tty):
        return None
    return CommandInput(
        sys.stdin.fileno() if interactive else None,
        tty=tty,
        size=_caller_size() if tty else None,
    )


@contextlib.contextmanager
def caller_terminal(given: CommandInput | None, interactive: bool) -> Iterator[None]:
    """Raw caller terminal and window-size forwarding while the command runs (-t)."""
    if given is None or not given.tty:
        yield
        return
    saved: list[Any] | None = None
    if interactive and os.isatty(0):
        saved = termios.tcgetattr(0)
        ttymod.setraw(0)

    def resized(signum: int, frame: FrameType | None) -> None:
        size = _caller_size()
        if size is not None:
            # the command may have ended and its terminal closed: nothing left to size
            with contextlib.suppress(OSError):
                given.resize(*size)

    previous = signal.signal(signal.SIGWINCH, resized)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)
        if saved is not None:
            termios.tcsetattr(0, termios.TCSADRAIN, saved)
