"""A TLS upstream on 127.0.0.1 that keeps every request it receives (host-side evidence of what
reached it) and answers with the request's headers and body echoed back — the shape of
httpbin's /anything, the case where a value put into a request would return to the command."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trustme


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Echo:
    port: int
    ca: trustme.CA
    seen: list[Seen] = field(default_factory=list)

    def ca_file(self, where: Path) -> Path:
        path = where / f"upstream-ca-{self.port}.pem"
        path.write_bytes(self.ca.cert_pem.bytes())
        return path

    def everything(self) -> bytes:
        return b"\n".join(s.path.encode() + repr(s.headers).encode() + s.body for s in self.seen)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body are two writes: with Nagle on, a keep-alive request waited out the
    # client's delayed ACK (40 ms a request in the benchmark).
    disable_nagle_algorithm = True

    def _echo(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.echo.seen.append(Seen(self.path, headers, body))  # type: ignore[attr-defined]
        out = json.dumps({"path": self.path, "headers": headers, "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.send_header("x-echo-authorization", headers.get("authorization", ""))
        self.end_headers()
        self.wfile.write(out)

    do_GET = _echo
    do_POST = _echo

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def echo_upstream(ca: trustme.CA | None = None) -> Iterator[Echo]:
    ca = ca or trustme.CA()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    # The handler's disable_nagle_algorithm comes after the TLS handshake (done in accept):
    # the session tickets and the first response then waited out a delayed ACK, 40 ms on
    # every fresh connection of both benchmark arms. Linux hands the option to accepted
    # sockets.
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    echo = Echo(port=server.server_address[1], ca=ca)
    server.echo = echo  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield echo
    finally:
        server.shutdown()
        server.server_close()
