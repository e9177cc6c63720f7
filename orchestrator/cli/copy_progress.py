"""A long first copy shows its progress on a terminal (rich), and only there.

The sync reports (files, bytes) every few hundred files (copy_walk.PROGRESS_EVERY). Nothing
is drawn unless stderr is a terminal, the caller did not ask for --json, and the sync has
already run for DELAY seconds: a resync of a known tree is over before that, and a pipe or
a JSON reader never sees a byte of it. The line is transient: it is erased when the sync ends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sprawl_orch.copy.bounds import human
from sprawl_orch.copy.walk import Progress

DELAY = 0.5


class _Bar:
    def __init__(self) -> None:
        self.started: float | None = None
        self.live: Any = None
        self.task: Any = None

    def __call__(self, files: int, size: int, done: bool) -> None:
        if done:
            self.stop()  # before the command's own output starts
            return
        now = time.monotonic()
        if self.started is None:
            self.started = now
        if self.live is None:
            if now - self.started < DELAY:
                return
            # rich only now: a call that never draws never imports it.
            from rich.console import Console
            from rich.progress import Progress as RichProgress
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self.live = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.live.start()
            self.task = self.live.add_task("")
        self.live.update(
            self.task,
            description=f"sprawl-orch: copying the working directory: "
            f"{files:,} files, {human(size)}",
        )

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


@contextmanager
def copy_progress(as_json: bool) -> Iterator[Progress | None]:
    """The progress callback for ExecTool, or None where nothing may be drawn."""
    if as_json or not sys.stderr.isatty():
        yield None
        return
    bar = _Bar()
    try:
        yield bar
    finally:
        bar.stop()
