"""Attacks on the egress proxy beyond test_egress_proxy.py, each against the real proxy object
and a real local upstream on 127.0.0.1 (the host's own evidence: what the upstream served).
The ones marked "was a break" failed on the proxy as it landed (issue 24) and pass now."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterator

import pytest

from sprawl_orch.egress import flows
from sprawl_orch.egress.addresses import host_addresses
from sprawl_orch.egress.proxy import MAX_CONNECTIONS, EgressProxy, Resolver
from sprawl_orch.egress.record import Egress
from sprawl_orch.egress.rules import IpAddress, Rules
from tests.egress.upstream import BODY, Upstream, connect_through, tls_get, upstream

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

    def make(
        *allow: str, deny: tuple[str, ...] = (), resolve: Resolver | None = None
    ) -> tuple[EgressProxy, tuple[str, int]]:
        proxy = EgressProxy(Rules.parse(allow, deny), resolve=resolve)
        proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        address = listener.getsockname()
        proxy.serve(listener)
        made.append(proxy)
        return proxy, address

    yield make
    for proxy in made:
        proxy.close()


def _records(proxy: EgressProxy) -> tuple[Egress, ...]:
    proxy.close()  # every connection's record is written by then
    return proxy.records()


def _fixed(*answers: str) -> tuple[Resolver, list[str]]:
    """A resolver answering `answers` (one list per call, the last repeated); the names asked."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[IpAddress]:
        asked.append(host)
        text = answers[min(len(asked), len(answers)) - 1]
        return [ipaddress.ip_address(a) for a in text.split(",")]

    return resolve, asked


def _status(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    while b"\r\n" not in data and (chunk := sock.recv(4096)):
        data += chunk
    return data.partition(b"\r\n")[0]


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("EXAMPLE.org.", True),  # case and one trailing dot: the same name
        ("example.org..", False),
        ("a.cdn.example.org.", True),
        ("cdn.example.org", False),  # a wildcard never matches its own suffix
        ("evil-cdn.example.org", False),
        ("cdn.example.org.evil.net", False),
        ("xn--exmple-cua.org", False),  # punycode of a lookalike (exämple.org)
        ("exаmple.org", False),  # Cyrillic а
        ("2130706433", False),  # 127.0.0.1 as getaddrinfo's decimal form
        ("0177.0.0.1", False),
    ],
)
def test_name_forms(name: str, allowed: bool) -> None:
    rules = Rules.parse(("example.org", "*.cdn.example.org"))
    assert (rules.decide(name, 443) is None) is allowed


@pytest.mark.parametrize(
    "target", ["2130706433", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]", "[::1]", "localhost"]
)
def test_loopback_in_any_spelling_is_refused(
    make_proxy: Make, tls_up: Upstream, target: str
) -> None:
    # 127.0.0.1 is listed on another port only: no spelling of it reaches the upstream's.
    proxy, address = make_proxy("*.example.org", "localhost", "127.0.0.1:1")
    status, sock = connect_through(address, f"{target}:{tls_up.port}")
    sock.close()
    assert status == 403
    (record,) = _records(proxy)
    assert not record.allowed and record.address is None
    assert tls_up.served() == 0


def test_listed_address_keeps_its_port_scope(make_proxy: Make, tls_up: Upstream) -> None:
    # Was a break: '127.0.0.1:1' listed loopback for every port, so a listed name resolving
    # to 127.0.0.1 reached any port of the host's loopback.
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1:1", "[::1]:1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    sock.close()
    assert status == 403
    (record,) = _records(proxy)
    assert "loopback" in record.reason and record.address is None


@pytest.mark.parametrize(
    "answer",
    [
        "100.64.1.1",
        "169.254.169.254",
        "fd00::1",
        "::ffff:169.254.169.254",
        "93.184.215.14,10.0.0.1",
    ],
)
def test_listed_name_resolving_to_a_refused_range(make_proxy: Make, answer: str) -> None:
    resolve, _ = _fixed(answer)
    proxy, address = make_proxy("pkg.example.org", resolve=resolve)
    status, sock = connect_through(address, "pkg.example.org:443")
    sock.close()
    assert status == 403
    (record,) = _records(proxy)
    assert "resolves to" in record.reason and record.address is None


def test_host_own_address_is_refused(make_proxy: Make, plain_up: Upstream) -> None:
    # Was a break: this machine's eth0 is 192.0.2.2 (a documentation range, not refused), so
    # a listed name resolving to it reached the host's own services on 0.0.0.0.
    own = sorted(str(a) for a in host_addresses() if not a.is_loopback)
    assert own, "the host has an address besides loopback"
    resolve, _ = _fixed(own[0])
    proxy, address = make_proxy("pkg.example.org", resolve=resolve)
    status, sock = connect_through(address, f"pkg.example.org:{plain_up.port}")
    sock.close()
    assert status == 403
    (record,) = _records(proxy)
    assert record.address is None and own[0] in record.reason


def test_name_is_resolved_once(make_proxy: Make, tls_up: Upstream) -> None:
    # A rebinding resolver: 127.0.0.1 (listed) first, the metadata address after.
    resolve, asked = _fixed("127.0.0.1", "169.254.169.254")
    proxy, address = make_proxy(
        f"rebind.example.org:{tls_up.port}", f"127.0.0.1:{tls_up.port}", resolve=resolve
    )
    status, sock = connect_through(address, f"rebind.example.org:{tls_up.port}")
    assert status == 200
    ctx = tls_up.client_context()
    ctx.check_hostname = False
    assert tls_get(sock, ctx, "rebind.example.org", "x").endswith(BODY)
    (record,) = _records(proxy)
    assert asked == ["rebind.example.org"] and record.address == "127.0.0.1"


def test_sni_case_and_trailing_dot_agree(make_proxy: Make, tls_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{tls_up.port}", f"127.0.0.1:{tls_up.port}", "::1")
    status, sock = connect_through(address, f"LocalHost.:{tls_up.port}")
    assert status == 200
    assert tls_get(sock, tls_up.client_context(), "localhost", "localhost").endswith(BODY)
    (record,) = _records(proxy)
    assert record.allowed and record.host == "localhost"


def test_sni_of_another_allowed_host_is_cut(make_proxy: Make, tls_up: Upstream) -> None:
    proxy, address = make_proxy("localhost", "other.example.org", "127.0.0.1", "::1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    ctx = tls_up.client_context()
    ctx.check_hostname = False
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(sock, ctx, "other.example.org", "other.example.org")
    sock.close()
    (record,) = _records(proxy)
    assert "SNI 'other.example.org' differs" in record.reason and tls_up.served() == 0


def _client_hello(sni: str) -> bytes:
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_client_hello_split_over_records_is_cut(make_proxy: Make, tls_up: Upstream) -> None:
    hello = _client_hello("localhost")
    body = hello[5:]
    half = len(body) // 2
    split = b"".join(
        hello[:3] + len(part).to_bytes(2, "big") + part for part in (body[:half], body[half:])
    )
    proxy, address = make_proxy("localhost", "127.0.0.1", "::1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    sock.sendall(split)
    assert sock.recv(100) == b""
    sock.close()
    (record,) = _records(proxy)
    assert "did not start with TLS" in record.reason and record.bytes_up == 0


def _plain(address: tuple[str, int], data: bytes) -> socket.socket:
    sock = socket.create_connection(address, timeout=30)
    sock.sendall(data)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)


def test_pipelined_and_kept_alive_requests_are_not_forwarded(
    make_proxy: Make, plain_up: Upstream
) -> None:
    proxy, address = make_proxy(f"localhost:{plain_up.port}", "127.0.0.1", "::1")
    url = f"http://localhost:{plain_up.port}/"
    one = f"GET {url} HTTP/1.1\r\nhost: localhost:{plain_up.port}\r\n\r\n".encode()
    two = b"GET / HTTP/1.1\r\nhost: evil.example.org\r\n\r\n"
    pipelined = _read_all(_plain(address, one + two))
    assert pipelined.count(b"HTTP/1.") == 1 and pipelined.endswith(BODY)
    kept = _plain(address, one)
    first = kept.recv(65536)
    # The proxy closes after the one response, once it read the upstream's end: that may come
    # after the client has the response (3 tries in 0.15 s were a timing assertion).
    deadline = time.monotonic() + 30
    with pytest.raises(OSError):
        while time.monotonic() < deadline:
            kept.sendall(two)
            time.sleep(0.05)
    assert first.startswith(b"HTTP/1.") and plain_up.served() == 2
    assert len(_records(proxy)) == 2


def test_transfer_encoding_with_content_length_is_refused(
    make_proxy: Make, plain_up: Upstream
) -> None:
    # Was a break: h11 framed by Transfer-Encoding and both headers went upstream.
    proxy, address = make_proxy(f"localhost:{plain_up.port}", "127.0.0.1", "::1")
    host = f"localhost:{plain_up.port}"
    smuggled = b"GET / HTTP/1.1\r\nhost: evil.example.org\r\n\r\n"
    body = f"{len(smuggled):x}\r\n".encode() + smuggled + b"\r\n0\r\n\r\n"
    head = (
        f"POST http://{host}/ HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n"
        f"content-length: 4\r\n\r\n"
    ).encode()
    answer = _read_all(_plain(address, head + body))
    assert answer.startswith(b"HTTP/1.1 400") and plain_up.served() == 0
    (record,) = _records(proxy)
    assert "Transfer-Encoding and Content-Length" in record.reason


@pytest.mark.parametrize(
    ("target", "host_header"),
    [
        ("/", "evil.example@localhost:{port}"),
        ("http://evil.example@localhost:{port}/", "localhost:{port}"),
        ("/", "localhost:{port}\\@evil.example"),
        ("/", "localhost:{port}/x"),
    ],
)
def test_an_authority_that_is_not_host_port_is_refused(
    make_proxy: Make, plain_up: Upstream, target: str, host_header: str
) -> None:
    # Was a break (found attacking issue 25): urlsplit reads `evil.example@localhost` as host
    # localhost, and the Host line went upstream as written, for a front end to route by the
    # part before '@'.
    proxy, address = make_proxy(f"localhost:{plain_up.port}", "127.0.0.1", "::1")
    port = plain_up.port
    head = (
        f"GET {target.format(port=port)} HTTP/1.1\r\nhost: {host_header.format(port=port)}\r\n\r\n"
    ).encode()
    answer = _read_all(_plain(address, head))
    assert answer.startswith(b"HTTP/1.1 400") and plain_up.served() == 0
    (record,) = _records(proxy)
    assert "is not a host[:port]" in record.reason


def test_a_connect_target_with_userinfo_is_refused(make_proxy: Make, tls_up: Upstream) -> None:
    _proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1", "::1")
    status, sock = connect_through(address, f"evil.example@localhost:{tls_up.port}")
    sock.close()
    assert status == 400


def test_every_connection_is_recorded(make_proxy: Make, plain_up: Upstream) -> None:
    # Was a break: a name the idna codec refuses and an HTTP/1.0 request without Host
    # raised past the flow: no record, no answer.
    proxy, address = make_proxy("*.example.org", f"localhost:{plain_up.port}", "127.0.0.1")
    status, sock = connect_through(address, "a..example.org:443")
    sock.close()
    assert status == 502
    old = f"GET http://localhost:{plain_up.port}/ HTTP/1.0\r\n\r\n".encode()
    assert _read_all(_plain(address, old)).endswith(BODY)
    refused, forwarded = sorted(_records(proxy), key=lambda r: r.allowed)
    assert "does not resolve" in refused.reason and forwarded.allowed


@pytest.mark.parametrize(
    "head",
    [b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (1 << 20) + b"\r\n\r\n", b"G" * (1 << 20)],
)
def test_huge_head_is_refused(make_proxy: Make, head: bytes) -> None:
    proxy, address = make_proxy("example.org")
    sock = _plain(address, head)
    assert _status(sock).startswith(b"HTTP/1.1 400")
    sock.close()
    (record,) = _records(proxy)
    assert "not an HTTP proxy request" in record.reason


def test_slow_head_is_cut(make_proxy: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows, "HEAD_TIMEOUT", 1.0)
    proxy, address = make_proxy("example.org")
    sock = _plain(address, b"GET / HTTP/1.1\r\n")
    with pytest.raises(OSError):
        for _ in range(200):  # a header line every 50 ms: the head never ends
            sock.sendall(b"x-slow: 1\r\n")
            time.sleep(0.05)
    sock.close()
    (record,) = _records(proxy)
    assert "no head in time" in record.reason


def test_connections_are_capped(make_proxy: Make) -> None:
    # Was a break: no cap; a command could open connections until the host process (the
    # orchestrator, with every other run) ran out of descriptors.
    proxy, address = make_proxy("example.org")
    idle = [socket.create_connection(address, timeout=30) for _ in range(MAX_CONNECTIONS)]
    extra = socket.create_connection(address, timeout=30)
    assert _status(extra).startswith(b"HTTP/1.1 503")
    extra.close()
    for sock in idle:
        sock.close()
    capped = [r for r in _records(proxy) if "connections open" in r.reason]
    assert len(capped) == 1 and not capped[0].allowed


def test_a_denied_address_wins_over_the_name_resolving_to_it(
    make_proxy: Make, plain_up: Upstream
) -> None:
    # Was a break: a denied IP literal was checked against names only, so an allowed name
    # resolving to that address was connected to. The host's own address stands in for a
    # public one (never an outside host); the deny is what the refusal names.
    own = sorted(str(a) for a in host_addresses() if not a.is_loopback)[0]
    resolve, _ = _fixed(own)
    proxy, address = make_proxy("pkg.example.org", deny=(own,), resolve=resolve)
    status, sock = connect_through(address, f"pkg.example.org:{plain_up.port}")
    sock.close()
    assert status == 403
    (record,) = _records(proxy)
    assert f"denied by {own!r}" in record.reason and record.address is None
