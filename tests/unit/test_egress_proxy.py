"""The host-side egress proxy against real local upstreams (TLS by trustme) on 127.0.0.1:
what is listed gets through, every known bypass is refused and recorded."""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Iterator

import pytest

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.record import Egress, summary
from sprawl_orch.egress.rules import Rules
from tests.egress.upstream import BODY, Upstream, connect_through, tls_get, upstream


@pytest.fixture
def tls_up() -> Iterator[Upstream]:
    with upstream(tls=True) as up:
        yield up


@pytest.fixture
def plain_up() -> Iterator[Upstream]:
    with upstream(tls=False) as up:
        yield up


@pytest.fixture
def make_proxy() -> Iterator[object]:
    made: list[EgressProxy] = []

    def make(*allow: str, deny: tuple[str, ...] = ()) -> tuple[EgressProxy, tuple[str, int]]:
        proxy = EgressProxy(Rules.parse(allow, deny))
        proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        address = listener.getsockname()
        proxy.serve(listener)
        made.append(proxy)
        return proxy, address

    yield make
    for proxy in made:
        proxy.close()


def _only(proxy: EgressProxy) -> Egress:
    proxy.close()  # every connection's record is written by then
    (record,) = proxy.records()
    return record


def test_listed_name_tunnels_and_is_recorded(make_proxy, tls_up: Upstream) -> None:
    # localhost resolves to loopback: reachable only because both addresses are listed.
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1", "::1")
    conn = http.client.HTTPSConnection(*address, context=tls_up.client_context(), timeout=30)
    conn.set_tunnel("localhost", tls_up.port)
    conn.request("GET", "/")
    assert conn.getresponse().read() == BODY
    conn.close()
    record = _only(proxy)
    assert record.allowed and record.kind == "connect" and record.host == "localhost"
    assert record.address == "127.0.0.1" and record.bytes_down > len(BODY)
    assert record.bytes_up > 0 and record.duration_s > 0
    assert "1 connection(s) allowed to localhost" in summary(proxy.records())


def test_unlisted_name_is_refused_with_403(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy("example.invalid")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    sock.close()
    assert status == 403
    record = _only(proxy)
    assert not record.allowed and "not in the allow list" in record.reason
    assert record.address is None


def test_port_scope(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy("localhost:1", "127.0.0.1", "::1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    sock.close()
    assert status == 403 and "not in the allow list" in _only(proxy).reason


def test_deny_wins(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy("localhost", "127.0.0.1", "::1", deny=("localhost",))
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    sock.close()
    assert status == 403 and _only(proxy).reason.endswith("denied by 'localhost'")


def test_sni_differing_from_connect_host_is_cut(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1", "::1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200  # the check needs the ClientHello, sent after the 200
    ctx = tls_up.client_context()
    ctx.check_hostname = False
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(sock, ctx, "evil.example.org", "evil.example.org")
    sock.close()
    record = _only(proxy)
    assert not record.allowed and "SNI 'evil.example.org' differs" in record.reason
    assert record.bytes_up == 0 and record.bytes_down == 0


def test_tunnel_without_tls_is_cut(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1", "::1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    sock.sendall(b"GET / HTTP/1.1\r\nhost: anything\r\n\r\n")
    assert sock.recv(100) == b""
    sock.close()
    record = _only(proxy)
    assert not record.allowed and "did not start with TLS" in record.reason


def test_ip_literal_refused_unless_listed(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{tls_up.port}")
    status, sock = connect_through(address, f"127.0.0.1:{tls_up.port}")
    sock.close()
    assert status == 403 and "IP literal not in the allow list" in _only(proxy).reason
    # Listed exactly, the literal is reached, without SNI (clients send none for an address).
    listed, at = make_proxy(f"127.0.0.1:{tls_up.port}")
    status, sock = connect_through(at, f"127.0.0.1:{tls_up.port}")
    assert status == 200
    assert tls_get(sock, tls_up.client_context(), None, "127.0.0.1").endswith(BODY)
    assert _only(listed).allowed


def test_listed_name_resolving_to_loopback_is_refused(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{tls_up.port}")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    sock.close()
    assert status == 403
    reason = _only(proxy).reason
    assert "localhost resolves to" in reason and "loopback" in reason


def test_plain_http_forwarded_by_host(make_proxy, plain_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{plain_up.port}", "127.0.0.1", "::1")
    conn = http.client.HTTPConnection(*address, timeout=30)
    conn.request("GET", f"http://localhost:{plain_up.port}/")
    response = conn.getresponse()
    assert response.read() == BODY
    assert response.getheader("x-seen-host") == f"localhost:{plain_up.port}"
    conn.close()
    record = _only(proxy)
    assert record.allowed and record.kind == "http" and record.bytes_down > len(BODY)


def test_plain_http_with_unlisted_host_header_is_refused(make_proxy, plain_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{plain_up.port}", "127.0.0.1", "::1")
    conn = http.client.HTTPConnection(*address, timeout=30)
    conn.putrequest("GET", f"http://localhost:{plain_up.port}/", skip_host=True)
    conn.putheader("host", "evil.example.org")
    conn.endheaders()
    assert conn.getresponse().status == 403
    conn.close()
    record = _only(proxy)
    assert not record.allowed and "Host header 'evil.example.org' differs" in record.reason
    # And an origin-form request is decided by its Host header alone.
    other, at = make_proxy(f"localhost:{plain_up.port}", "127.0.0.1", "::1")
    conn = http.client.HTTPConnection(*at, timeout=30)
    conn.putrequest("GET", "/", skip_host=True)
    conn.putheader("host", f"evil.example.org:{plain_up.port}")
    conn.endheaders()
    assert conn.getresponse().status == 403
    conn.close()
    assert "evil.example.org" in _only(other).reason


def test_garbage_is_refused_with_400(make_proxy) -> None:
    proxy, address = make_proxy("example.invalid")
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x05hello\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    record = _only(proxy)
    assert not record.allowed and "not an HTTP proxy request" in record.reason


def test_close_ends_open_tunnels(make_proxy, tls_up: Upstream) -> None:
    proxy, address = make_proxy(f"localhost:{tls_up.port}", "127.0.0.1", "::1")
    status, sock = connect_through(address, f"localhost:{tls_up.port}")
    assert status == 200
    tls = tls_up.client_context().wrap_socket(sock, server_hostname="localhost")
    proxy.close()
    assert tls.recv(10) == b""  # the proxy's end is the network's end
    tls.close()
    (record,) = proxy.records()
    assert record.allowed
