"""Local upstreams for the egress tests: stdlib HTTP(S) servers on 127.0.0.1 (TLS from a
`trustme` CA), each answering GET with a fixed body, and a proxy client that can lie."""

from __future__ import annotations

import contextlib
import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import h11
import trustme

BODY = b"upstream says hello\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.served += 1  # type: ignore[attr-defined]
        size = int(self.path.rpartition("/")[2]) if self.path.startswith("/bytes/") else 0
        body = BODY if not size else b"x" * size
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-seen-host", self.headers.get("host", ""))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Upstream:
    port: int
    ca: trustme.CA | None
    server: http.server.ThreadingHTTPServer | None = None

    def served(self) -> int:
        """Requests the upstream answered (host-side evidence of what got through)."""
        return int(getattr(self.server, "served", 0))

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        assert self.ca is not None
        self.ca.configure_trust(ctx)
        return ctx


@contextlib.contextmanager
def upstream(tls: bool) -> Iterator[Upstream]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.served = 0  # type: ignore[attr-defined]
    ca = None
    if tls:
        ca = trustme.CA()
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Upstream(port=server.server_address[1], ca=ca, server=server)
    finally:
        server.shutdown()
        server.server_close()


def connect_through(proxy: tuple[str, int], target: str) -> tuple[int, socket.socket]:
    """CONNECT `target` through the proxy; (status, the socket)."""
    sock = socket.create_connection(proxy, timeout=30)
    conn = h11.Connection(h11.CLIENT)
    sock.sendall(
        conn.send(h11.Request(method="CONNECT", target=target, headers=[("host", target)])) or b""
    )
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Response):
            return event.status_code, sock
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        else:
            raise AssertionError(f"unexpected {event!r}")


def tls_get(sock: socket.socket, ctx: ssl.SSLContext, sni: str | None, host: str) -> bytes:
    """A GET over TLS on `sock` with `sni` as server_hostname; the raw response bytes."""
    if sni is None:
        ctx.check_hostname = False
    tls = ctx.wrap_socket(sock, server_hostname=sni)
    tls.sendall(f"GET / HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode())
    chunks = []
    while data := tls.recv(65536):
        chunks.append(data)
    return b"".join(chunks)
