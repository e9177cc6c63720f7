"""The attacker of the kept relay threads: a TLS 1.3 HelloRetryRequest lets a client name one
server in the ClientHello the proxy checks and another in the second ClientHello, the one an
OpenSSL server acts on (openssl/openssl#32472: its server-name processing reads the second).
Against the real proxy and a real TLS server on 127.0.0.1 (Python's ssl, trustme's CA)."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import threading
from collections.abc import Iterator

import pytest
import trustme
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from tlslite.constants import CipherSuite, GroupName, SignatureScheme
from tlslite.extensions import (
    ClientKeyShareExtension,
    KeyShareEntry,
    SignatureAlgorithmsExtension,
    SNIExtension,
    SupportedGroupsExtension,
    SupportedVersionsExtension,
)
from tlslite.messages import ClientHello

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from tests.polling import until as _until

# ServerHello.random of a HelloRetryRequest (RFC 8446 §4.1.3), written out: the test's own.
RETRY_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")


def _hello(sni: str, share: bytes | None, random: bytes, session: bytes) -> bytes:
    """A TLS 1.3 ClientHello record; no key share (share None) makes the server ask again."""
    shares = [] if share is None else [KeyShareEntry().create(GroupName.x25519, bytearray(share))]
    extensions = [
        SNIExtension().create(bytearray(sni.encode())),
        SupportedVersionsExtension().create([(3, 4)]),
        SupportedGroupsExtension().create([GroupName.x25519]),
        SignatureAlgorithmsExtension().create(
            [SignatureScheme.rsa_pss_rsae_sha256, SignatureScheme.ecdsa_secp256r1_sha256]
        ),
        ClientKeyShareExtension().create(shares),
    ]
    hello = ClientHello().create(
        (3, 3),
        bytearray(random),
        bytearray(session),
        [CipherSuite.TLS_AES_128_GCM_SHA256],
        extensions=extensions,
    )
    message = bytes(hello.write())
    return bytes([22, 3, 1]) + struct.pack(">H", len(message)) + message


def _record(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 5 or len(data) < 5 + struct.unpack(">H", data[3:5])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    return data


class _Server:
    """A TLS 1.3 server whose SNI callback notes every name it is asked for."""

    def __init__(self) -> None:
        self.names: list[str | None] = []
        ca = trustme.CA()
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("localhost").configure_cert(self.ctx)
        self.ctx.sni_callback = lambda _s, name, _c: self.names.append(name)  # type: ignore[assignment,misc]
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass


@pytest.fixture
def server() -> Iterator[_Server]:
    made = _Server()
    yield made
    made.sock.close()


def _tunnel(server: _Server, second_name: str, together: bool) -> tuple[bytes, EgressProxy]:
    proxy = EgressProxy(Rules.parse((f"localhost:{server.port}", "127.0.0.1", "::1")))
    proxy.start()
    listener = socket.create_server(("127.0.0.1", 0))
    proxy.serve(listener)
    sock = socket.create_connection(listener.getsockname(), timeout=30)
    target = f"localhost:{server.port}"
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n".encode())
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    random, session = os.urandom(32), os.urandom(32)
    share = X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    second = _hello(second_name, share, random, session)
    first = _hello("localhost", None, random, session)
    if together:  # both hellos in one write: the server reads the second after its retry
        sock.sendall(first + second)
        answer = _record(sock)
    else:
        sock.sendall(first)
        answer = _record(sock)
        assert answer[11:43] == RETRY_RANDOM  # the server asked again
        sock.sendall(second)
    sock.settimeout(5)
    try:  # the ServerHello to the second hello (unless it came with the retry), or a cut
        rest = _record(sock)
    except TimeoutError:
        rest = b""
    sock.close()
    proxy.close()  # every connection's record is written by then
    return answer + rest, proxy


@pytest.mark.parametrize("together", [False, True])
def test_a_second_hello_naming_another_server_is_cut(server: _Server, together: bool) -> None:
    # Was a break: only the first ClientHello was checked; the server answered the second,
    # its SNI callback asked for evil.example.org (domain fronting past the SNI check).
    answer, proxy = _tunnel(server, "evil.example.org", together)
    assert "evil.example.org" not in server.names, server.names
    (record,) = proxy.records()
    assert not record.allowed and "evil.example.org" in record.reason, record
    assert answer[11:43] == RETRY_RANDOM  # the retry itself still reached the client


@pytest.mark.parametrize("together", [False, True])
def test_a_second_hello_naming_the_same_server_goes_through(
    server: _Server, together: bool
) -> None:
    answer, proxy = _tunnel(server, "localhost", together)
    # The server reads the second hello on its own thread, and what the client waited for may
    # be only the change_cipher_spec the server sent after its retry (passed down as the
    # second hello went up), not the ServerHello to the second hello.
    assert _until(lambda: len(server.names) >= 2)
    assert server.names == ["localhost", "localhost"]
    (record,) = proxy.records()
    # The ServerHello after the retry came back: the tunnel carried both hellos' answers.
    assert record.allowed and record.bytes_down > len(answer) // 2 > 0, record


def test_what_passes_before_a_second_hello_is_bounded(server: _Server) -> None:
    # The proxy holds the records a client sends between a retry and its second hello; a
    # stream of change_cipher_spec records must end the tunnel, not grow the proxy.
    proxy = EgressProxy(Rules.parse((f"localhost:{server.port}", "127.0.0.1", "::1")))
    proxy.start()
    listener = socket.create_server(("127.0.0.1", 0))
    proxy.serve(listener)
    sock = socket.create_connection(listener.getsockname(), timeout=30)
    target = f"localhost:{server.port}"
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n".encode())
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    sock.sendall(_hello("localhost", None, os.urandom(32), os.urandom(32)))
    assert _record(sock)[11:43] == RETRY_RANDOM
    change_cipher_spec = bytes([20, 3, 3, 0, 1, 1])
    sent = 0
    with contextlib.suppress(OSError):  # cut: the proxy stopped taking them
        while sent < 64 * 1024 * 1024:
            sock.sendall(change_cipher_spec * 4096)
            sent += len(change_cipher_spec) * 4096
    sock.close()
    proxy.close()
    (record,) = proxy.records()
    assert not record.allowed and "before the retried ClientHello" in record.reason, record
    assert sent < 64 * 1024 * 1024
