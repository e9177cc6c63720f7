"""The proxy's own failure ends the network (issue 24, bad input): when its loop dies mid-run,
the listener is closed (the next connection is refused at once, not left in a backlog nobody
accepts from), an open tunnel is cut, and `failure` says what happened.

The loop is killed the way a loop really dies: an exception asyncio does not hand to its
exception handler (SystemExit) escaping a callback on the proxy's own thread. The trigger is
this test's code reaching the proxy object it made; the product has no switch for it."""

from __future__ import annotations

import socket
import ssl
import time

import pytest

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import IpAddress, Rules
from tests.egress.upstream import Upstream, connect_through, upstream


class _Dies(SystemExit):
    """Raised on the proxy's loop: SystemExit is what asyncio lets out of run_forever."""


def _kill_loop(proxy: EgressProxy) -> None:
    loop = proxy._loop
    assert loop is not None

    def die() -> None:
        raise _Dies("the test killed the proxy's loop")

    loop.call_soon_threadsafe(die)
    assert proxy._thread is not None
    proxy._thread.join(30)
    assert not proxy._thread.is_alive()


def _started(
    up: Upstream, cls: type[EgressProxy] = EgressProxy
) -> tuple[EgressProxy, tuple[str, int]]:
    proxy = cls(Rules.parse((f"localhost:{up.port}", "127.0.0.1", "::1")))
    proxy.start()
    listener = socket.create_server(("127.0.0.1", 0))
    address = listener.getsockname()
    proxy.serve(listener)
    return proxy, address


def test_a_dead_loop_closes_its_listener_and_cuts_open_tunnels() -> None:
    with upstream(tls=True) as up:
        proxy, address = _started(up)
        status, sock = connect_through(address, f"localhost:{up.port}")
        assert status == 200
        tls = up.client_context().wrap_socket(sock, server_hostname="localhost")
        _kill_loop(proxy)
        # The open tunnel (idle in the splice relay) ends rather than hanging.
        tls.settimeout(30)
        try:
            ended = tls.recv(100) == b""
        except (ssl.SSLError, ConnectionResetError):
            ended = True  # cut without close_notify: also the end
        tls.close()
        assert ended
        # The next connection is refused by the kernel: nothing listens any more.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=10).close()
        assert proxy.failure is not None and "loop died" in proxy.failure
        assert "the test killed the proxy's loop" in proxy.failure
        proxy.close()  # after the failure: a no-op, and the failure stays said
        assert proxy.failure is not None
        assert up.served() == 0  # the tunnel carried a handshake only


def test_a_loop_dying_inside_a_connection_cuts_that_connection() -> None:
    """The loop dies while a connection is being decided (in its resolve): that client is
    closed by the loop's last run, not left waiting on a proxy that no longer runs."""

    class DiesOnResolve(EgressProxy):
        async def resolve(self, host: str, port: int) -> list[IpAddress]:
            raise _Dies("died deciding a connection")

    with upstream(tls=False) as up:
        proxy, address = _started(up, DiesOnResolve)
        client = socket.create_connection(address, timeout=30)
        head = f"GET http://localhost:{up.port}/ HTTP/1.1\r\nHost: localhost:{up.port}\r\n\r\n"
        client.sendall(head.encode())
        start = time.monotonic()
        try:
            answer = client.recv(100)
        except ConnectionResetError:
            answer = b""
        assert answer == b"" and time.monotonic() - start < 20
        client.close()
        assert proxy._thread is not None
        proxy._thread.join(30)
        assert proxy.failure is not None and "died deciding a connection" in proxy.failure
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=10).close()
        assert up.served() == 0
        proxy.close()


def test_an_orderly_close_is_no_failure() -> None:
    with upstream(tls=False) as up:
        proxy, _address = _started(up)
        proxy.close()
        assert proxy.failure is None
        assert proxy._thread is not None and not proxy._thread.is_alive()


def test_a_tunnel_cut_by_a_dying_loop_is_recorded_as_such_with_its_bytes() -> None:
    # Was a lie: the cut tunnel's record said "the proxy closed (the run ended)" when the
    # proxy had failed. Its bytes: at least what reached the client and the request sent.
    with upstream(tls=True) as up:
        proxy, address = _started(up)
        status, sock = connect_through(address, f"localhost:{up.port}")
        assert status == 200
        tls = up.client_context().wrap_socket(sock, server_hostname="localhost")
        request = b"GET /bytes/8000000 HTTP/1.1\r\nhost: localhost\r\n\r\n"
        tls.sendall(request)
        received = 0
        while received < 500_000:
            received += len(tls.recv(65536))
        _kill_loop(proxy)
        tls.close()
        (record,) = proxy.records()
        assert record.allowed and record.reason.startswith("the proxy failed")
        assert record.bytes_down >= received and record.bytes_up > len(request)
