"""A checked tunnel's bytes, carried both ways by the kernel: splice(2) socket -> pipe -> socket.

Copying through asyncio streams read every byte into Python and wrote it out again; on this
machine (benchmarks/egress_proxy.py, 20 MB over TLS from an upstream on 127.0.0.1) that held
a tunnel to 0.60-0.76x of the direct throughput, the issue's bound being 0.8x. splice moves
pages between the sockets and a pipe without their bytes entering the process. The proxy
only learns how many moved (the record's bytes up/down).

Taking a socket from its asyncio transport: reading paused, the transport's write buffer
flushed to empty, and whatever its StreamReader already buffered sent first (it came before
anything splice will move). The reader's buffer has no public accessor; when its private
`_buffer` is not the bytearray it has been since 3.4, `take_over` says no and the flow keeps
the stream copy (the same bytes, slower), so an asyncio change costs speed, never bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from asyncio.trsock import TransportSocket
from collections.abc import Callable
from typing import Protocol

# One splice moves at most a pipe's capacity. The 64 KiB default pipe made 16 round trips
# through the loop per MiB; 1 MiB is Linux's default pipe-max-size for unprivileged callers.
# F_SETPIPE_SZ is fcntl's 1031 (Python 3.10+ names it on Linux only).
PIPE_SIZE = 1024 * 1024
_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)

Count = Callable[[int], None]


def available() -> bool:
    return hasattr(os, "splice")


def _buffered(reader: asyncio.StreamReader) -> bytearray | None:
    buffer = getattr(reader, "_buffer", None)
    return buffer if isinstance(buffer, bytearray) else None


class Sock(Protocol):
    """What the relay needs of a socket (asyncio hands out a TransportSocket, not a socket)."""

    def fileno(self) -> int: ...

    def shutdown(self, how: int, /) -> None: ...


def _socket_of(writer: asyncio.StreamWriter) -> Sock | None:
    sock = writer.get_extra_info("socket")
    if not isinstance(sock, (socket.socket, TransportSocket)) or sock.fileno() < 0:
        return None
    return sock


async def take_over(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
    """Pause the stream, flush what it still has to write, and return what it had read but not
    handed out (to be sent ahead of the spliced bytes); None when splicing cannot take it."""
    if not available() or _buffered(reader) is None or _socket_of(writer) is None:
        return None
    transport = writer.transport
    if not isinstance(transport, asyncio.Transport):
        return None
    transport.pause_reading()
    # drain() returns once the buffer is under the low-water mark; 0 makes that "empty", so
    # nothing the stream still holds can arrive after a spliced byte.
    transport.set_write_buffer_limits(high=0, low=0)
    await writer.drain()
    buffer = _buffered(reader)
    assert buffer is not None
    early = bytes(buffer)
    buffer.clear()
    return early


async def _ready(fd: int, writable: bool) -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    if writable:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await future
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def _send_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            sent = os.write(fd, view)
        except BlockingIOError:  # the socket's buffer is full: wait until it drains
            await _ready(fd, writable=True)
            continue
        view = view[sent:]


class _OneWay:
    """One direction as a loop callback, the way asyncio's own transports read: the source
    stays registered (level-triggered) while the pipe drains into the sink; only a full sink
    swaps it for a wait on the sink. A first version awaited a fresh future per wait —
    add/remove of the descriptor each time — and carried 0.61x where the stream copy
    carried 0.75x."""

    def __init__(self, src: int, dst: int, count: Count, done: asyncio.Future[None]) -> None:
        self.loop = asyncio.get_running_loop()
        self.src, self.dst, self.count, self.done = src, dst, count, done
        self.pipe_out, self.pipe_in = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # Only the pipe's size: a refusal (EPERM past the user's pipe pages) leaves 64 KiB,
        # slower and still correct.
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.pipe_in, _SETPIPE_SZ, PIPE_SIZE)
        self.pending = 0
        self.reading = self.writing = False

    def _watch(self, reading: bool) -> None:
        if reading and not self.reading:
            self.loop.add_reader(self.src, self._readable)
        elif not reading and self.reading:
            self.loop.remove_reader(self.src)
        if not reading and not self.writing:
            self.loop.add_writer(self.dst, self._writable)
        elif reading and self.writing:
            self.loop.remove_writer(self.dst)
        self.reading, self.writing = reading, not reading

    def _flush(self) -> bool:
        while self.pending:
            try:
                out = os.splice(self.pipe_out, self.dst, self.pending, flags=_FLAGS)
            except BlockingIOError:  # the destination is full: its writable callback resumes
                return False
            self.pending -= out
            self.count(out)
        return True

    def _readable(self) -> None:
        try:
            moved = os.splice(self.src, self.pipe_in, PIPE_SIZE, flags=_FLAGS)
        except BlockingIOError:  # nothing to read yet: the readable callback fires again
            return
        except OSError as err:
            self._end(err)
            return
        if moved == 0:
            self._end(None)
            return
        self.pending += moved
        try:
            if not self._flush():
                self._watch(reading=False)
        except OSError as err:
            self._end(err)

    def _writable(self) -> None:
        try:
            if self._flush():
                self._watch(reading=True)
        except OSError as err:
            self._end(err)

    def _end(self, err: OSError | None) -> None:
        if not self.done.done():
            if err is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(err)

    def start(self) -> None:
        self._watch(reading=True)

    def close(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.src)
        if self.writing:
            self.loop.remove_writer(self.dst)
        self.reading = self.writing = False
        os.close(self.pipe_in)
        os.close(self.pipe_out)


async def one_way(source: Sock, sink: Sock, early: bytes, count: Count) -> None:
    """Carry `early` and then everything `source` sends into `sink` until its EOF, which is
    passed on as a half close. A reset or error on either side ends both directions."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    way = _OneWay(source.fileno(), sink.fileno(), count, done)
    try:
        if early:
            await _send_all(sink.fileno(), early)
            count(len(early))
        way.start()
        await done
        # The other side may still answer: only our direction ends.
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
    except OSError:
        # A reset (or a peer gone) on either side: both directions end, as a closed socket
        # ended both in the stream copy; the flow's counts say what went through.
        for sock in (source, sink):
            with contextlib.suppress(OSError):  # already shut or reset: nothing left to end
                sock.shutdown(socket.SHUT_RDWR)
    finally:
        way.close()


async def both_ways(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    first: bytes,
    up: Count,
    down: Count,
) -> bool:
    """Splice the tunnel (first: the client's bytes already read, sent upstream first).
    False, with nothing sent, when either stream cannot be taken over."""
    if not available() or any(
        _buffered(r) is None or _socket_of(w) is None for r, w in (client, upstream)
    ):
        return False
    from_client = await take_over(*client)
    from_upstream = await take_over(*upstream)
    if from_client is None or from_upstream is None:
        # Both are plain TCP transports from start_server/open_connection, checked above;
        # this only guards a loop that hands out something else.
        raise OSError("a tunnel's stream could not be taken over for splicing")
    # Duplicates: asyncio refuses add_reader on a descriptor a transport still owns (the
    # transports close the originals with the flow); shutdown on one acts on the socket.
    with _dup(client[1]) as client_sock, _dup(upstream[1]) as upstream_sock:
        await asyncio.gather(
            one_way(client_sock, upstream_sock, first + from_client, up),
            one_way(upstream_sock, client_sock, from_upstream, down),
        )
    return True


def _dup(writer: asyncio.StreamWriter) -> socket.socket:
    sock = _socket_of(writer)
    if sock is None:
        raise OSError("a tunnel's socket was closed before splicing")
    return socket.socket(fileno=os.dup(sock.fileno()))
