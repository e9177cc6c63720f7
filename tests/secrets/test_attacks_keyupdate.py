"""A TLS 1.3 KeyUpdate (update_requested) from the upstream in the middle of an answer whose
body holds the value across it: the session thread calls _ssl's read directly (tls.py), and
OpenSSL must take the new keys, queue its own KeyUpdate, and hand out the bytes on both sides
of it as one stream the scrub sees whole. Held when tried (atkwire), in a body read whole
and one streamed past 64 KiB. The upstream is tlslite-ng (Python's ssl cannot send a
KeyUpdate); real proxy on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from tlslite.api import HandshakeSettings, TLSConnection, X509CertChain, parsePEMKey
from tlslite.constants import KeyUpdateMessageType

from tests.secrets.raw import Raw
from tests.secrets.test_attacks import VALUE, Rig, _auth_of, _body


def _serve(listener: socket.socket, leaf: trustme.LeafCert, raw: Raw, pad: int) -> None:
    chain = X509CertChain()
    chain.parsePemList("".join(b.bytes().decode() for b in leaf.cert_chain_pems))
    key = parsePEMKey(leaf.private_key_pem.bytes().decode(), private=True)
    settings = HandshakeSettings()
    settings.minVersion = settings.maxVersion = (3, 4)
    with contextlib.suppress(OSError):
        sock, _ = listener.accept()
        conn = TLSConnection(sock)
        conn.handshakeServer(
            certChain=chain, privateKey=key, settings=settings, alpn=[bytearray(b"http/1.1")]
        )
        got = b""
        while b"\r\n\r\n" not in got:
            got += bytes(conn.read())
        raw.heads.append(got)
        value = _auth_of(got)
        before, after = b"p" * pad + b"<" + value[:10], value[10:] + b"> and " + value
        length = len(before) + len(after)
        conn.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (length, before))
        for _ in conn.send_keyupdate_request(KeyUpdateMessageType.update_requested):
            pass
        conn.write(after)
        with contextlib.suppress(Exception):  # the proxy's KeyUpdate, then its close
            conn.read(max=1, min=1)
        conn.close()


@pytest.fixture(params=[0, 70 * 1024], ids=["whole", "streamed"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    ca = trustme.CA()
    listener = socket.create_server(("127.0.0.1", 0))
    raw = Raw(listener.getsockname()[1], ca)
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    args = (listener, leaf, raw, request.param)
    threading.Thread(target=_serve, args=args, daemon=True).start()
    r = Rig(raw, tmp_path)
    try:
        yield r
    finally:
        r.proxy.close()
        listener.close()


def test_a_keyupdate_in_the_middle_of_an_echo_leaves_it_scrubbed(rig: Rig) -> None:
    got = rig.send(
        "GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    body = _body(got)
    assert body.endswith(b"<" + rig.ph.encode() + b"> and " + rig.ph.encode()), got[-300:]
    assert VALUE.encode() not in got
    assert rig.run.report()["echoes_scrubbed"]
