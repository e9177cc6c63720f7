"""TLS's close_notify read in the same turn as a message's last record (tls.TlsEnd._more): the
record's bytes went on, and the next read waited at the socket for bytes a peer that has
said its last never sends. An upstream that answers until close and then waits for the
proxy's close_notify before closing TCP (a bidirectional shutdown: Python's unwrap(), OpenSSL
servers that call SSL_shutdown twice) left the command waiting for its answer's end until
that upstream gave up. Real proxy; the upstream writes its answer and close_notify in one
segment (an ssl.MemoryBIO end), then keeps the connection open."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.secrets.raw import Raw, exchange
from tests.secrets.test_attacks import Rig

ANSWER = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil-close body"


def _serve(listener: socket.socket, ctx: ssl.SSLContext, raw: Raw, done: threading.Event) -> None:
    sock, _ = listener.accept()
    with sock:
        into, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(into, out, server_side=True)
        got = b""
        while b"\r\n\r\n" not in got:  # the handshake, then the request's head
            try:
                got += tls.read(65536)
            except ssl.SSLWantReadError:
                sock.sendall(out.read())
                data = sock.recv(65536)
                if not data:
                    return
                into.write(data)
        raw.heads.append(got)
        tls.write(ANSWER)
        with contextlib.suppress(ssl.SSLWantReadError):  # close_notify written, the peer's
            tls.unwrap()  # is waited for below
        sock.sendall(out.read())  # the answer's record and close_notify in one segment
        done.wait(60)  # a bidirectional shutdown: TCP stays open until the proxy's end


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    listener = socket.create_server(("127.0.0.1", 0))
    raw = Raw(listener.getsockname()[1], ca)
    done = threading.Event()
    thread = threading.Thread(target=_serve, args=(listener, ctx, raw, done), daemon=True)
    thread.start()
    r = Rig(raw, tmp_path)
    try:
        yield r
    finally:
        done.set()
        r.proxy.close()
        listener.close()


def test_an_answer_ended_by_close_notify_in_the_same_segment_reaches_the_command(
    rig: Rig,
) -> None:
    out: list[bytes] = []
    client = threading.Thread(
        target=lambda: out.append(
            exchange(
                rig.port,
                "localhost",
                rig.up.port,
                rig.bundle,
                f"GET / HTTP/1.1\r\nHost: localhost:{rig.up.port}\r\n\r\n".encode(),
            )
        ),
        daemon=True,
    )
    client.start()
    client.join(20)  # the answer ends at once; 20 s only bounds the wait for a hang
    assert not client.is_alive(), "the command still waits for its answer's end"
    assert b"until-close body" in out[0], out
