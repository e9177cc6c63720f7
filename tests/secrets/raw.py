"""Raw-bytes ends for attacking the interception: a TLS upstream on 127.0.0.1 that keeps every
byte it received and answers what a handler says (any head, any framing, duplicate headers),
and a client that speaks CONNECT then TLS then whatever bytes a test writes. curl and
http.server normalise what an attacker would not (one Host, a well-formed reason phrase)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trustme

Handler = Callable[[bytes, list[bytes]], bytes]  # (this request's head, earlier heads) -> reply


@dataclass
class Raw:
    port: int
    ca: trustme.CA
    heads: list[bytes] = field(default_factory=list)

    def ca_file(self, where: Path) -> Path:
        path = where / f"raw-ca-{self.port}.pem"
        path.write_bytes(self.ca.cert_pem.bytes())
        return path


def _serve_one(conn: ssl.SSLSocket, raw: Raw, handler: Handler) -> None:
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                try:
                    data = conn.recv(65536)
                except (OSError, ssl.SSLError):
                    # The proxy cut the connection: that ends this exchange.
                    return
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            earlier = list(raw.heads)
            raw.heads.append(head)
            conn.sendall(handler(head, earlier))


@contextlib.contextmanager
def raw_upstream(handler: Handler) -> Iterator[Raw]:
    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    listener = socket.create_server(("127.0.0.1", 0))
    raw = Raw(port=listener.getsockname()[1], ca=ca)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # the listener was closed: the test is over
            try:
                conn = ctx.wrap_socket(sock, server_side=True)
            except (OSError, ssl.SSLError):
                sock.close()  # a handshake the proxy abandoned
                continue
            threading.Thread(target=_serve_one, args=(conn, raw, handler), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield raw
    finally:
        stop.set()
        listener.close()


def exchange(proxy_port: int, host: str, port: int, bundle: Path, data: bytes) -> bytes:
    """CONNECT host:port through the proxy, TLS (trusting `bundle`), write `data`, read to
    the end; b"" when the proxy refused the CONNECT."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=60)
    with sock:
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                return b""
            reply += chunk
        if b" 200" not in reply.split(b"\r\n")[0]:
            return b""
        ctx = ssl.create_default_context(cafile=str(bundle))
        with ctx.wrap_socket(sock, server_hostname=host) as tls:
            tls.sendall(data)
            out = b""
            while True:
                try:
                    chunk = tls.recv(65536)
                except (OSError, ssl.SSLError):
                    return out  # cut by the proxy: what came before is what the command got
                if not chunk:
                    return out
                out += chunk
