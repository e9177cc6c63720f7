"""Waiting for what a proxy's thread or loop does on its own clock."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], bool], within: float = 30.0) -> bool:
    """Polls `check` until it holds (not a timing assertion: a generous deadline, the first
    success ends it). False if it never held within `within` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
