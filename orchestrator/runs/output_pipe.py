"""A running command's two streams through pipes this process reads, so that what it prints
costs the host's disk at most a cap while it runs (issue 30 break 4), on every arm at once.

Every arm writes the streams to `outputs/stdout` and `outputs/stderr`, opened while the arm
starts the command (HostProcess hands the files to the child; the docker pumps and the
podman CLIs write them). Cutting kept output only after the command (output_keep.py) left
the run itself unbounded: `head -c 3221225472 /dev/zero` put 3 GiB on the host first. So,
before the arm starts, each name is a FIFO with this process as its reader; the arm opens
it as it would the file, and the pump here writes the first `cap` bytes into a data file
and only counts the rest. Once the arm has started (every writer has opened its end), the
data file is renamed over the FIFO's name, so whatever reads the streams afterwards (the
CLI's Follower, the result) reads the data as before. At the end the bytes seen go to
`<name>.total` when some were not written, and the result names the cut.

The pump also holds a write end of its own, so a FIFO with no writer yet never reads as
ended; `stop()` lets go of it and reads to the end, or to a deadline when something the
command left (a daemon on copied_tree) still holds a write end -- which then gets EPIPE.
With `follow` (the CLI's human mode) every byte also goes to the two sinks as it comes:
the person sees the whole stream live, though the file holds only the first `cap` bytes.
Not on Windows (no FIFOs): there the files stay files and only the kept copy is cut.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from pathlib import Path
from typing import BinaryIO

from sprawl_orch.core.private import private_dirs

NAMES = ("stdout", "stderr")
CHUNK = 1 << 16
STOP_SECONDS = 2.0


def available() -> bool:
    return hasattr(os, "mkfifo") and hasattr(select, "poll")


class CappedStreams:
    def __init__(
        self, outputs: Path, cap: int, follow: tuple[BinaryIO, BinaryIO] | None = None
    ) -> None:
        private_dirs(outputs)
        self.outputs, self.cap = outputs, cap
        self._follow = dict(zip(NAMES, follow, strict=True)) if follow is not None else {}
        self._reads: dict[int, str] = {}
        self._dummies: list[int] = []
        self._data: dict[str, int] = {}
        self.seen = dict.fromkeys(NAMES, 0)
        self.written = dict.fromkeys(NAMES, 0)
        self._stop = threading.Event()
        self._fds = threading.Lock()
        self._deadline: float | None = None
        try:
            for name in NAMES:
                fifo = outputs / name
                os.mkfifo(fifo, 0o600)
                # Reader first (non-blocking open succeeds without a writer), then our own
                # writer, so that no EOF is seen before the arm's writers have come and gone.
                r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                self._reads[r] = name
                self._dummies.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
                self._data[name] = os.open(
                    outputs / f"{name}.data",
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                    0o600,
                )
        except BaseException:
            self._close_all()
            raise
        self._thread = threading.Thread(target=self._pump, name="sprawl-output", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """Every writer has its end: the names now show the data (Follower, the result)."""
        for name in NAMES:
            os.replace(self.outputs / f"{name}.data", self.outputs / name)

    def stop(self, grace: float = STOP_SECONDS) -> None:
        """The command is finished: read what is left, then end; write the totals."""
        with self._fds:
            dummies, self._dummies = self._dummies, []
        for fd in dummies:
            # close(2) releases the fd even when it reports an error: nothing to undo
            with contextlib.suppress(OSError):
                os.close(fd)
        self._deadline = time.monotonic() + grace
        self._thread.join(grace + 1.0)
        self._stop.set()
        self._thread.join()
        for name in NAMES:
            fifo = self.outputs / name
            if fifo.is_fifo():  # never started: the data goes under the name as it is
                with contextlib.suppress(OSError):
                    os.replace(self.outputs / f"{name}.data", fifo)
            if self.seen[name] > self.written[name]:
                # the count only feeds the cut note: without it the file's size is used
                with contextlib.suppress(OSError):
                    (self.outputs / f"{name}.total").write_text(str(self.seen[name]))

    def _pump(self) -> None:
        poller = select.poll()
        for fd in self._reads:
            poller.register(fd, select.POLLIN | select.POLLHUP)
        try:
            while self._reads and not self._stop.is_set():
                if self._deadline is not None and time.monotonic() > self._deadline:
                    break
                for fd, _ in poller.poll(100):
                    try:
                        chunk = os.read(fd, CHUNK)
                    except BlockingIOError:
                        # nothing to read yet: the poll woke for another fd
                        continue
                    if not chunk:
                        if not self._dummies:  # every writer is gone, ours too
                            poller.unregister(fd)
                            with self._fds:
                                self._reads.pop(fd)
                            os.close(fd)
                        continue
                    self._take(self._reads[fd], chunk)
        finally:
            self._close_all()

    def _take(self, name: str, chunk: bytes) -> None:
        self.seen[name] += len(chunk)
        sink = self._follow.get(name)
        if sink is not None:
            try:
                sink.write(chunk)
                sink.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._follow.pop(name)  # the reader went away (`| head`); the command runs on
        room = self.cap - self.written[name]
        if room > 0:
            part = chunk[:room]
            os.write(self._data[name], part)
            self.written[name] += len(part)

    def _close_all(self) -> None:
        # Under the lock, each fd taken once: a number closed twice may by then name another
        # thread's file.
        with self._fds:
            fds = [*self._reads, *self._dummies, *self._data.values()]
            self._reads, self._dummies, self._data = {}, [], {}
        for fd in fds:
            # close(2) releases the fd even when it reports an error: nothing to undo
            with contextlib.suppress(OSError):
                os.close(fd)
