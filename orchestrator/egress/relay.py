"""A checked tunnel's bytes, carried both ways by the kernel: splice(2) socket -> pipe -> socket.

Copying through asyncio streams read every byte into Python and wrote it out again; on this
machine (benchmarks/egress_proxy.py, 20 MB over TLS from an upstream on 127.0.0.1) that held
a tunnel to 0.60-0.76x of the direct throughput, the issue's bound being 0.8x. splice moves
pages between the sockets and a pipe without their bytes entering the process. The proxy
only learns how many moved (the record's bytes up/down).

Each direction blocks in splice on a thread of its own, rather than the proxy's loop waking
per readable event: side by side in one run (load 2.3-2.4, 30 reps of 20 MB each), loop
callbacks carried 0.77-0.82x of direct where blocking threads carried 0.82-0.86x, and the
proxy's CPU per MB fell from 0.57-0.59 to 0.38-0.51 ms (rusage, three runs: one epoll
round and a callback per ~100 KB chunk gone).
A thread is two per open tunnel (the proxy caps tunnels at MAX_CONNECTIONS), kept by the
proxy for its next tunnel once a direction ends (workers.py); cutting both sockets (shutdown)
is what ends a blocked splice when the proxy closes.

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
# No SPLICE_F_NONBLOCK: each direction blocks in the kernel on a thread of its own. No
# SPLICE_F_MORE: it corks the socket, and a tunnel cannot know that more is coming (a TLS
# handshake's last flight would sit until the next write).
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1)

Count = Callable[[int], None]
Run = Callable[[Callable[[], None]], None]


def available() -> bool:
    return hasattr(os, "splice")


def _buffered(reader: asyncio.StreamReader) -> bytearray | None:
    buffer = getattr(reader, "_buffer", None)
    return buffer if isinstance(buffer, bytearray) else None


class Sock(Protocol):
    """What the relay needs of a socket (asyncio hands out a TransportSocket, not a socket)."""

    def fileno(self) -> int: ...

    def shutdown(self, how: int, /) -> None: ...


def socket_of(writer: asyncio.StreamWriter) -> Sock | None:
    sock = writer.get_extra_info("socket")
    if not isinstance(sock, (socket.socket, TransportSocket)) or sock.fileno() < 0:
        return None
    return sock


async def take_over(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
    """Pause the stream, flush what it still has to write, and return what it had read but not
    handed out (to be sent ahead of the spliced bytes); None when its internals are not what
    this expects. The socket is then the caller's to make blocking and use from a thread
    (the splice here, the interception's session in secrets/handoff.py)."""
    if _buffered(reader) is None or socket_of(writer) is None:
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


def _pipe() -> tuple[int, int]:
    """A pipe (read end, write end) of PIPE_SIZE where the kernel allows it."""
    pipe_out, pipe_in = os.pipe2(os.O_CLOEXEC)
    # Only the pipe's size: a refusal (EPERM past the user's pipe pages) leaves 64 KiB,
    # slower and still correct.
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe_in, _SETPIPE_SZ, PIPE_SIZE)
    return pipe_out, pipe_in


def _pump(source: Sock, sink: Sock, pipe: tuple[int, int], early: bytes, count: Count) -> None:
    """One direction, blocking, on a thread of its own: `early`, then source -> pipe -> sink
    until the source's EOF (passed on as a half close). A reset or error on either side ends
    both directions, as a closed socket ended both in the stream copy."""
    pipe_out, pipe_in = pipe
    try:
        view = memoryview(early)
        while view:
            sent = os.write(sink.fileno(), view)
            count(sent)
            view = view[sent:]
        # A blocking splice returns what the socket holds (tcp_splice_read stops once it
        # moved something and the queue is empty), so a small answer is not held back.
        while moved := os.splice(source.fileno(), pipe_in, PIPE_SIZE, flags=_FLAGS):
            while moved:
                out = os.splice(pipe_out, sink.fileno(), moved, flags=_FLAGS)
                moved -= out
                count(out)
        # The other side may still answer: only this direction ends.
        with contextlib.suppress(OSError):  # the peer already went: nothing left to end
            sink.shutdown(socket.SHUT_WR)
    except OSError:  # a reset or error on either side: both directions end (below)
        cut(source, sink)
    finally:
        os.close(pipe_in)
        os.close(pipe_out)


def _send_now(sink: Sock, data: bytes, count: Count) -> bytes:
    """Send what the socket takes at once (still non-blocking) from the loop, before any
    thread starts; the rest, if any, is the thread's to send first. (The checked hello itself
    now goes up before this, alone, so the server's first record can be read: retry.py.)
    Bytes once went out only when their thread had started: on 2 loaded cores a thread's start
    took 0.15 ms median, 3 ms at the 90th percentile (benchmarks/egress_proxy.py's setup row),
    every ms of it added to the tunnel's setup. A refusal
    (EAGAIN: full; or the peer gone) sends nothing here: the thread meets the same socket and
    a reset there ends both directions, as before."""
    if not data:
        return data
    try:
        sent = os.write(sink.fileno(), data)
    except OSError:
        return data
    count(sent)
    return data[sent:]


def cut(*socks: Sock) -> None:
    """Both directions end: a blocked splice on either socket returns (0 or EPIPE)."""
    for sock in socks:
        with contextlib.suppress(OSError):  # already shut or reset: nothing left to end
            sock.shutdown(socket.SHUT_RDWR)


async def carried(job: Callable[[], None], run: Run, socks: tuple[Sock, Sock]) -> None:
    """Run `job` on the thread `run` hands it (both sockets blocking) and wait for its end.
    Cancelled, cut `socks` so the thread returns, and wait for it still: the caller closes
    both sockets once this returns, and a thread still in a call on a closed (and reused)
    descriptor number would move some other file's bytes; a second cancel must not end the
    wait (the cut makes it short). No thread to be had (RuntimeError from `run`: none left,
    or the proxy closed): `socks` are cut and it is raised here, in the flow, where it is
    recorded. The relay's directions and an intercepted connection's session
    (secrets/handoff.py) both run so."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def carry() -> None:
        try:
            job()
        finally:
            # RuntimeError: the proxy's loop already closed (nobody waits for this thread).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, done)

    try:
        run(carry)
    except RuntimeError:
        cut(*socks)
        raise
    try:
        await asyncio.shield(done)
    except asyncio.CancelledError:
        cut(*socks)
        while not done.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(done)
        raise


async def one_way(
    source: Sock, sink: Sock, pipe: tuple[int, int], early: bytes, count: Count, run: Run
) -> None:
    """Carry `early` and then everything `source` sends into `sink` on a thread of its own
    (`run` hands it one: the proxy's Workers), as `carried` says. A pipe (made by both_ways,
    before any byte left) is the thread's to close; when no thread can be had it is closed
    here and the RuntimeError raised in the flow."""
    try:
        await carried(lambda: _pump(source, sink, pipe, early, count), run, (source, sink))
    except RuntimeError:  # the job never ran: its pipe is ours to close
        os.close(pipe[0])
        os.close(pipe[1])
        raise


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def both_ways(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    first: bytes,
    up: Count,
    down: Count,
    run: Run,
) -> bool:
    """Splice the tunnel (first: the client's bytes already read, sent upstream first; `run`
    puts each direction on a thread: workers.Workers.run).
    False, with nothing sent, when either stream cannot be taken over."""
    if not available() or any(
        _buffered(r) is None or socket_of(w) is None for r, w in (client, upstream)
    ):
        return False
    from_client = await take_over(*client)
    from_upstream = await take_over(*upstream)
    client_sock, upstream_sock = socket_of(client[1]), socket_of(upstream[1])
    if from_client is None or from_upstream is None or client_sock is None or not upstream_sock:
        # Both are plain TCP transports from start_server/open_connection, checked above;
        # this only guards a loop that hands out something else.
        raise OSError("a tunnel's stream could not be taken over for splicing")
    # The transports' own descriptors, not duplicates: the threads need no loop reader, and
    # two duplicates per tunnel were a third of what a tunnel held against the process's
    # descriptor limit (proxy.FDS_PER_TUNNEL). The transports are paused with nothing left
    # to write and are closed only after both threads returned (below, and one_way's
    # cancel). O_NONBLOCK is the open file's; TransportSocket refuses setblocking(True).
    # Both pipes before any byte leaves from here: a tunnel that cannot have them (EMFILE)
    # sends nothing more either way (the server's flight, read by then, would have let the
    # client finish its handshake on a tunnel that is cut next).
    pipes: list[tuple[int, int]] = []
    try:
        pipes.append(_pipe())
        pipes.append(_pipe())
    except OSError:
        for made in pipes:
            os.close(made[0])
            os.close(made[1])
        cut(client_sock, upstream_sock)
        raise
    to_upstream = _send_now(upstream_sock, first + from_client, up)
    to_client = _send_now(client_sock, from_upstream, down)
    os.set_blocking(client_sock.fileno(), True)
    os.set_blocking(upstream_sock.fileno(), True)
    ways = await asyncio.gather(
        one_way(client_sock, upstream_sock, pipes[0], to_upstream, up, run),
        one_way(upstream_sock, client_sock, pipes[1], to_client, down, run),
        return_exceptions=True,
    )
    # Both directions have ended (a failed start cut both sockets, so the other thread
    # returned) before the flow closes the descriptors a thread might still splice on.
    for way in ways:
        if isinstance(way, BaseException):
            raise way
    return True
