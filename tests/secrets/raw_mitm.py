"""The floor for benchmarks/secrets_proxy.py: a minimal man-in-the-middle with the same TLS
library (the ssl module, OpenSSL) and no policy at all. It answers a CONNECT with 200, ends the
client's TLS with the run's leaf for the host, speaks TLS to the upstream, and forwards the
decrypted bytes both ways without parsing them: no HTTP reader, no swap, no scrub, no record.
What the interception costs above it is what its policy costs; what it costs above the tunnel
is what ending and re-making TLS in Python costs. One thread per connection (as the
interception's), non-blocking sockets and select: a blocking read of the upstream's
post-handshake session tickets would otherwise wait for application data that never comes."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading

CHUNK = 256 * 1024


def _send(sock: ssl.SSLSocket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            sent = sock.send(view)
        except ssl.SSLWantWriteError:
            select.select([], [sock], [])
            continue
        view = view[sent:]


def _carry(a: ssl.SSLSocket, b: ssl.SSLSocket) -> None:
    peer = {a: b, b: a}
    for sock in peer:
        sock.setblocking(False)
    while True:
        ready, _, _ = select.select([a, b], [], [])
        for sock in ready:
            try:
                data = sock.recv(CHUNK)
                while sock.pending():
                    data += sock.recv(CHUNK)
            except ssl.SSLWantReadError:
                continue  # a partial record, or only session tickets
            if not data:
                return
            _send(peer[sock], data)


class RawMitm:
    """Listens on 127.0.0.1; every CONNECT goes to 127.0.0.1:`port` (the named host is only
    the upstream's SNI and the leaf's name)."""

    def __init__(
        self, leaf: ssl.SSLContext, upstream: ssl.SSLContext, port: int, host: str = "localhost"
    ) -> None:
        self.leaf, self.upstream, self.target, self.host = leaf, upstream, port, host
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._accept = threading.Thread(target=self._serve, name="raw-mitm", daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                conn, _ = self.listener.accept()
                thread = threading.Thread(target=self._one, args=(conn,), daemon=True)
                with self._lock:
                    self._socks.append(conn)
                    self._threads.append(thread)
                thread.start()

    def _one(self, conn: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(conn)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            raw_up = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._socks.append(raw_up)
            stack.enter_context(raw_up)
            raw_up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with contextlib.suppress(OSError, ssl.SSLError):  # either side went
                client = stack.enter_context(self.leaf.wrap_socket(conn, server_side=True))
                up = stack.enter_context(
                    self.upstream.wrap_socket(raw_up, server_hostname=self.host)
                )
                _carry(client, up)

    def close(self) -> None:
        # close() alone does not return a blocked accept() on Linux; shutdown does.
        with contextlib.suppress(OSError):  # never listened on: nothing to wake
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self._lock:
            socks, threads = list(self._socks), list(self._threads)
        for sock in socks:
            with contextlib.suppress(OSError):  # already closed by its thread
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(timeout=30)
        self._accept.join(timeout=30)
