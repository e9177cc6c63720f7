"""More attacks on the egress proxy (the third round's attacker), each against the real proxy
and a real local upstream on 127.0.0.1: request and address forms test_egress_attacks.py does
not try, a ClientHello cut into single bytes, what a cut tunnel's record says, and the limit
of a check that does not look inside TLS. The ones marked "was a break" failed before."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterator

import pytest

from sprawl_orch.egress import flows
from sprawl_orch.egress.addresses import refused
from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.record import Egress
from sprawl_orch.egress.rules import Rules
from tests.egress.upstream import BODY, Upstream, connect_through, upstream

Make = Callable[..., tuple[EgressProxy, tuple[str, int]]]


@pytest.fixture
def tls_up() -> Iterator[Upstream]:
    with upstream(tls=True) as up:
        yield up


@pytest.fixture
def plain_up() -> Iterator[Upstream]:
    with upstream(tls=False) as up:
        yield up


@pytest.fixture
def make_proxy() -> Iterator[Make]:
    made: list[EgressProxy] = []

    def make(*allow: str) -> tuple[EgressProxy, tuple[str, int]]:
        proxy = EgressProxy(Rules.parse(allow))
        proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        proxy.serve(listener)
        made.append(proxy)
        return proxy, listener.getsockname()

    yield make
    for proxy in made:
        proxy.close()


def _records(proxy: EgressProxy) -> tuple[Egress, ...]:
    proxy.close()  # every connection's record is written by then
    return proxy.records()


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:0:7f00:1",  # IPv4-translated (RFC 2765, SIIT) 127.0.0.1
        "::ffff:0:a9fe:a9fe",  # ... 169.254.169.254
        "64:ff9b:1::a9fe:a9fe",  # local-use IPv4/IPv6 translation (RFC 8215)
        "64:ff9b:1:ffff::1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, its client 127.0.0.1
    ],
)
def test_ipv4_carried_in_other_ipv6_forms_is_refused(address: str) -> None:
    # Was a break: mapped, NAT64 (64:ff9b::/96) and 6to4 were read for the IPv4 inside, these
    # forms were not: a translator or tunnel of the host's network reaches that IPv4 address.
    assert refused(ipaddress.ip_address(address)) is not None


def test_two_host_headers_are_refused(make_proxy: Make, plain_up: Upstream) -> None:
    # The check reads one Host; a front end routing by the other would go elsewhere. h11
    # refuses the request (RFC 9112 §3.2: 400), so neither goes upstream.
    proxy, address = make_proxy(f"localhost:{plain_up.port}", "127.0.0.1", "::1")
    head = (
        f"GET / HTTP/1.1\r\nhost: localhost:{plain_up.port}\r\nhost: evil.example.org\r\n\r\n"
    ).encode()
    sock = socket.create_connection(address, timeout=30)
    sock.sendall(head)
    assert _read_all(sock).startswith(b"HTTP/1.1 400") and plain_up.served() == 0
    (record,) = _records(proxy)
    assert not record.allowed


@pytest.mark.parametrize(
    "target",
    [
        "localhost:{port}.",
        "localhost.:{port}:{port}",
        "localhost:+{port}",
        "localhost:{port}0000",
        "[fe80::1%25lo]:{port}",
        "localhost\t:{port}",
        "lоcalhost:{port}",  # Cyrillic о
        "localhost:{port}/x",
        "localhost:{port}#@evil.example.org",
    ],
)
def test_connect_target_forms_are_refused(make_proxy: Make, tls_up: Upstream, target: str) -> None:
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1", "::1")
    sock = socket.create_connection(address, timeout=30)
    sock.sendall(f"CONNECT {target.format(port=tls_up.port)} HTTP/1.1\r\n\r\n".encode())
    assert _read_all(sock).startswith(b"HTTP/1.1 400") and tls_up.served() == 0
    records = _records(proxy)
    assert len(records) == 1 and not records[0].allowed and records[0].address is None


def _client_hello(sni: str) -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_a_hello_in_single_byte_segments_is_read_whole(make_proxy: Make, tls_up: Upstream) -> None:
    # One byte per TCP segment: the SNI is checked on the whole record, never on a prefix
    # (a check on the first segment alone would let a differing name through).
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "other.example.org", "127.0.0.1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for byte in _client_hello("other.example.org"):
        sock.sendall(bytes([byte]))
        time.sleep(0.0005)
    assert sock.recv(100) == b""
    sock.close()
    (record,) = _records(proxy)
    assert "differs from the CONNECT host" in record.reason and record.bytes_up == 0


def test_a_cut_tunnel_still_counts_its_bytes(make_proxy: Make, tls_up: Upstream) -> None:
    # The run ends (proxy closed) while 8 MB are on their way down: the record counts at
    # least what reached the client, and the request that went up.
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    tls = tls_up.client_context().wrap_socket(sock, server_hostname="localhost")
    request = b"GET /bytes/8000000 HTTP/1.1\r\nhost: localhost\r\n\r\n"
    tls.sendall(request)
    received = 0
    while received < 1_000_000:
        received += len(tls.recv(65536))
    proxy.close()
    with pytest.raises((OSError, ssl.SSLError)):  # cut: the 8 MB never all arrive
        while tls.recv(65536):
            pass
        raise OSError("the tunnel ended")
    tls.close()
    (record,) = proxy.records()
    assert record.reason == "the proxy closed (the run ended)"
    assert record.bytes_down >= received and record.bytes_up > len(request)


def test_a_host_inside_tls_is_not_seen(make_proxy: Make, tls_up: Upstream) -> None:
    # The stated limit (docs/egress.md): without interception the proxy checks the CONNECT
    # host and the SNI, not the Host header inside TLS; a front end serving the listed name
    # that routes by that header (a CDN) takes the request where the header says.
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    tls = tls_up.client_context().wrap_socket(sock, server_hostname="localhost")
    tls.sendall(b"GET / HTTP/1.1\r\nhost: unlisted.example.org\r\nconnection: close\r\n\r\n")
    answer = _read_all(tls)
    assert b"x-seen-host: unlisted.example.org" in answer.lower() and answer.endswith(BODY)
    (record,) = _records(proxy)
    assert record.allowed and record.host == "localhost"


def test_a_slow_hello_is_cut(
    make_proxy: Make, tls_up: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was a break: the head had a deadline, the ClientHello only one per read — a byte every
    # few seconds held the checked upstream connection open for days (16 KiB at 30 s each)
    # while its SNI was never decided. The whole hello now has the head's deadline.
    monkeypatch.setattr(flows, "HEAD_TIMEOUT", 1.0)
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)  # with a timeout, Python polls before a MSG_DONTWAIT recv
    hello = _client_hello("localhost")
    ended = False
    for byte in hello[:60]:  # one byte every 0.1 s: each read well within the deadline
        try:
            sock.sendall(bytes([byte]))
            time.sleep(0.1)
            ended = sock.recv(1, socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            continue  # nothing to read: the tunnel is still open
        except OSError:
            ended = True  # reset by the proxy
        if ended:
            break
    sock.close()
    assert ended, "60 bytes of a hello over 6 s and the tunnel still waits"
    (record,) = _records(proxy)
    assert not record.allowed and record.bytes_up == 0 and "ClientHello within" in record.reason
