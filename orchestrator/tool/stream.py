"""Live output: a command's stdout and stderr copied, byte for byte, as they grow.

Every arm writes the command's streams to two files (`Launch.outputs`); the CLI's human
mode follows them into its own stdout/stderr the way `docker run` attaches, so
`sprawl-orch exec -- cat image.png > copy.png` copies the file exactly. No decoding, no
cap: the cap with its way back belongs to `--json`, serve and the API (results.py).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import BinaryIO

POLL_SECONDS = 0.02
CHUNK = 1 << 16


class Follower:
    """Copies `outputs/stdout` and `outputs/stderr` into two binary sinks from a thread."""

    def __init__(self, outputs: Path, stdout: BinaryIO, stderr: BinaryIO) -> None:
        self._pairs = [(outputs / "stdout", stdout), (outputs / "stderr", stderr)]
        self._offsets = [0, 0]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="sprawl-follow", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._pump()

    def _pump(self) -> None:
        with self._lock:
            for i, (path, sink) in enumerate(self._pairs):
                try:
                    with open(path, "rb") as source:
                        source.seek(self._offsets[i])
                        while chunk := source.read(CHUNK):
                            self._offsets[i] += len(chunk)
                            self._write(sink, chunk)
                except FileNotFoundError:
                    continue  # the arm has not made it yet

    @staticmethod
    def _write(sink: BinaryIO, chunk: bytes) -> None:
        try:
            sink.write(chunk)
            sink.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the reader went away (`| head`); the command still ends normally

    def drain(self) -> None:
        """After the command's streams are complete: copy what is left and stop."""
        self._stop.set()
        self._thread.join()
        self._pump()
