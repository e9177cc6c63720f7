"""Waiting for what another thread or process does on its own clock."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], bool], within: float = 30.0, every: float = 0.01) -> bool:
    """Polls `check` every `every` seconds until it holds (not a timing assertion: a generous
    deadline, the first success ends it). False if it never held within `within` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True
