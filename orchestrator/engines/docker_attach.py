"""A docker container's run through the SDK: attach (before start, so nothing is missed) ->
start -> wait, its output streamed byte-exact into two files (engines/docker.py's start, and
the warm pool's exec stream, container/warm_exec.py).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sprawl_orch.engines.engine import engine_error

if TYPE_CHECKING:
    from docker import APIClient

API_TIMEOUT = 120
STREAM_DRAIN_SECONDS = 10.0
POLL_SECONDS = 0.05
START_RECOVERY = "the docker runtime could not start the container; see `sprawl-orch doctor`"


class DockerAttached:
    """attach (before start, so nothing is missed) -> start -> wait, via the SDK.

    Output comes from the attach stream, not `logs`: the json-file log driver stores lines
    as JSON strings and hands back U+FFFD for every byte that is not UTF-8 (seen: 5 MB of
    random bytes came back as 9.3 MB). The stream carries the bytes as written, into the
    two files as they arrive. `streams` is a client without a read timeout: a command
    that prints nothing for minutes must not cut its own output off.
    """

    def __init__(
        self, api: APIClient, streams: APIClient, container: str, stdout: Path, stderr: Path
    ) -> None:
        import docker.errors

        self._api, self._id = api, container
        self.start_error: str | None = None
        self._done = False
        self._out: IO[bytes] = stdout.open("wb")
        self._err: IO[bytes] = stderr.open("wb")
        self._pump_error: str | None = None
        self._stream = streams.attach(
            container, stdout=True, stderr=True, stream=True, logs=False, demux=True
        )
        self._reader = threading.Thread(
            target=self._pump, name=f"sprawl-attach-{container[:12]}", daemon=True
        )
        self._reader.start()
        try:
            api.start(container)
        except docker.errors.APIError as err:
            # e.g. 'exec: "nope": executable file not found in $PATH': the command never ran
            self.start_error = str(err.explanation or err)
            self._done = True
            self._close_stream()

    def _close_stream(self) -> None:
        close_hijacked(self._stream)

    def _pump(self) -> None:
        try:
            pump_demuxed(self._stream, self._out, self._err)
        except Exception as err:  # the stream's end is the container's end; say the rest
            if not self._done and self.start_error is None:
                self._pump_error = f"{type(err).__name__}: {err}"

    def wait(self, timeout: float | None) -> bool:
        import docker.errors
        import requests

        if self._done:
            return True
        try:
            if timeout is not None and timeout <= POLL_SECONDS:
                # a poll (harvest): one inspect, instead of a long-poll that times out and
                # costs its pooled connection
                state = self._api.inspect_container(self._id).get("State") or {}
                if state.get("Running") or state.get("Status") in ("running", "paused"):
                    return False
                # Ended: /wait answers at once, but not within the poll's 1 ms (that raised
                # ReadTimeout under load in the MCP soak).
                timeout = API_TIMEOUT
            # timeout=None reaches requests as None: wait as long as it takes
            self._api.wait(self._id, timeout=None if timeout is None else max(timeout, 0.001))
        except requests.exceptions.ReadTimeout:
            return False  # a long-poll's window passed with the container still running
        except requests.exceptions.ConnectionError as err:
            if "timed out" in str(err):
                return False
            raise engine_error("docker", "wait", str(err), START_RECOVERY) from err
        except docker.errors.NotFound:
            pass  # removed behind our back (guardian, a person): it is over; finish says so
        self._done = True
        return True

    def collect(self) -> str | None:
        # the attach stream ends with the container; give it a moment to drain
        self._reader.join(STREAM_DRAIN_SECONDS)
        self._close_stream()
        self._reader.join(STREAM_DRAIN_SECONDS)
        if self._pump_error:
            self._err.write(f"[sprawl-orch: output stream broke: {self._pump_error}]\n".encode())
        if self.start_error:
            self._err.write(f"{self.start_error}\n".encode())
        self._out.close()
        self._err.close()
        return self.start_error


def pump_demuxed(
    stream: Iterable[tuple[bytes | None, bytes | None]], out: IO[bytes], err: IO[bytes]
) -> None:
    """Copy an attach or exec stream (demux=True: (stdout, stderr) chunks) into two files as
    it arrives, each chunk flushed at once (a follower reads the files live). The stream's
    errors are the caller's: its end is the command's end."""
    for out_chunk, err_chunk in stream:
        if out_chunk:
            out.write(out_chunk)
            out.flush()
        if err_chunk:
            err.write(err_chunk)
            err.flush()


def close_hijacked(stream: Any) -> None:
    """Close an attach or exec stream's socket for real. It was hijacked from the pool, and the
    SDK's CancellableStream.close() skips it once the stream hit EOF (`raw.closed` is then
    true) — every command leaked one socket until this (docker/docker-py#2766)."""
    response = getattr(stream, "_response", None)
    fp = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    with contextlib.suppress(Exception):
        stream.close()
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    if response is not None:
        response.close()
