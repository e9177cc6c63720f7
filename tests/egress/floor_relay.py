"""The benchmark's raw floor: the bare mechanism of one more loopback hop, with no proxy logic.

Accept on 127.0.0.1, read the CONNECT head (up to its blank line, nothing parsed), connect to the
one upstream it was made for, answer 200, then carry both directions on two threads — either
by splice(2) socket -> pipe -> socket as relay.py does (same pipe size, same flags, same
blocking sockets, TCP_NODELAY on both legs), or by plain blocking recv_into/sendall copies.
What the proxy adds on top of this (asyncio, h11, the checks, taking the streams over) is the
gap between its ratio and this one; what this one loses against direct is the hop itself.
Threads: new ones per connection (the bare way), or kept between connections as the proxy
keeps its relay's (egress/workers.py) — that alone moved the proxy's body-only ratio by ~0.1.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import socket
import threading
from collections.abc import Callable

PIPE_SIZE = 1024 * 1024
_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1)
COPY_CHUNK = 1024 * 1024

Pump = Callable[[socket.socket, socket.socket], None]
Run = Callable[[Callable[[], None]], None]


def new_thread(job: Callable[[], None]) -> None:
    threading.Thread(target=job, daemon=True).start()


def splice_pump(source: socket.socket, sink: socket.socket) -> None:
    pipe_out, pipe_in = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe_in, _SETPIPE_SZ, PIPE_SIZE)
    try:
        while moved := os.splice(source.fileno(), pipe_in, PIPE_SIZE, flags=_FLAGS):
            while moved:
                moved -= os.splice(pipe_out, sink.fileno(), moved, flags=_FLAGS)
    finally:
        os.close(pipe_in)
        os.close(pipe_out)


def copy_pump(source: socket.socket, sink: socket.socket) -> None:
    buffer = bytearray(COPY_CHUNK)
    view = memoryview(buffer)
    while got := source.recv_into(buffer):
        sink.sendall(view[:got])


def _both(client: socket.socket, upstream: socket.socket, pump: Pump, run: Run) -> None:
    def one(source: socket.socket, sink: socket.socket) -> None:
        try:
            pump(source, sink)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    down = threading.Event()

    def downwards() -> None:
        try:
            one(upstream, client)
        finally:
            down.set()

    run(downwards)
    one(client, upstream)
    down.wait()


def _handle(client: socket.socket, upstream_port: int, pump: Pump, run: Run) -> None:
    with client:
        head = b""
        while b"\r\n\r\n" not in head:
            data = client.recv(4096)
            if not data:
                return
            head += data
        with socket.create_connection(("127.0.0.1", upstream_port)) as upstream:
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.sendall(b"HTTP/1.1 200 \r\n\r\n")
            early = head.partition(b"\r\n\r\n")[2]
            if early:
                upstream.sendall(early)
            _both(client, upstream, pump, run)


def serve_floor(
    upstream_port: int, pump: Pump, run: Run = new_thread
) -> tuple[int, Callable[[], None]]:
    """Start a floor relay to 127.0.0.1:`upstream_port` (`run`: how a connection's two
    threads are had); (its port, a close function)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed: the benchmark is done
                return
            run(functools.partial(_handle, client, upstream_port, pump, run))

    threading.Thread(target=accept, daemon=True).start()

    def close() -> None:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()

    return listener.getsockname()[1], close
