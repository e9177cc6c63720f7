"""The spliced tunnel (egress/relay.py) between real TCP sockets on 127.0.0.1: every byte in
order (what the streams had already buffered first), half closes passed on, a reset ending
both directions, and the counts the flow records."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import ssl
import struct
import threading
from collections.abc import Callable

import pytest

from sprawl_orch.egress import relay
from sprawl_orch.egress.workers import Workers

Pair = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _connected() -> tuple[Pair, socket.socket]:
    """(the proxy's stream end, the peer's blocking socket) of one real TCP connection."""
    server = socket.create_server(("127.0.0.1", 0))
    with server:
        pair = await asyncio.open_connection(*server.getsockname()[:2])
        peer, _ = server.accept()
    return pair, peer


def _tunnel(
    body: Callable[[socket.socket, socket.socket], None],
    first: bytes = b"",
    buffered: bytes = b"",
) -> tuple[bool, int, int]:
    """Run `body(client_peer, upstream_peer)` on a thread while both_ways carries the tunnel
    (on threads of its own Workers, as a proxy's); returns both_ways' answer and the bytes
    counted up and down."""
    counts = [0, 0]
    workers = Workers()

    async def main() -> bool:
        client, client_peer = await _connected()
        upstream, upstream_peer = await _connected()
        client[0].feed_data(buffered)  # read by the stream, not yet handed out
        worker = threading.Thread(target=body, args=(client_peer, upstream_peer))
        worker.start()

        def up(n: int) -> None:
            counts[0] += n

        def down(n: int) -> None:
            counts[1] += n

        try:
            return await asyncio.wait_for(
                relay.both_ways(client, upstream, first, up, down, workers.run), 60
            )
        finally:
            await asyncio.to_thread(worker.join, 60)
            workers.close()
            for _, writer in (client, upstream):
                writer.close()
            client_peer.close()
            upstream_peer.close()

    spliced = asyncio.run(main())
    return spliced, counts[0], counts[1]


def _all(sock: socket.socket) -> bytes:
    got = bytearray()
    while chunk := sock.recv(1 << 20):
        got += chunk
    return bytes(got)


def test_bytes_arrive_in_order_and_half_closes_pass_on() -> None:
    seen: dict[str, bytes] = {}

    def body(client: socket.socket, upstream: socket.socket) -> None:
        client.sendall(b" then-live")
        client.shutdown(socket.SHUT_WR)  # the client is done sending, still reading
        seen["upstream"] = _all(upstream)  # ends only if the half close was passed on
        upstream.sendall(b"answer after the client's EOF")
        upstream.shutdown(socket.SHUT_WR)
        seen["client"] = _all(client)

    spliced, up, down = _tunnel(body, first=b"hello", buffered=b" buffered")
    assert spliced
    assert seen["upstream"] == b"hello buffered then-live"
    assert seen["client"] == b"answer after the client's EOF"
    assert (up, down) == (len(seen["upstream"]), len(seen["client"]))


def test_the_checked_first_bytes_leave_before_a_relay_thread_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ClientHello (and what the client's stream had buffered) is sent from the loop while
    the relay's threads are still to start, not by the first of them once it runs: on 2
    loaded cores a start took 3 ms at the 90th percentile, added to every tunnel's setup. A
    spy on the threads' start looks (MSG_PEEK) at what the upstream already holds."""
    peers: dict[str, socket.socket] = {}
    have, peeked = threading.Event(), threading.Event()
    seen: dict[str, bytes] = {}
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "sprawl-egress-splice" and "at start" not in seen:
            assert have.wait(30)
            peer = peers["upstream"]
            peer.settimeout(5)  # before the change nothing came: the spy's recv timed out
            try:
                seen["at start"] = peer.recv(100, socket.MSG_PEEK)
            except TimeoutError:
                seen["at start"] = b""
            peeked.set()
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)

    def body(client: socket.socket, upstream: socket.socket) -> None:
        peers["upstream"] = upstream
        have.set()
        assert peeked.wait(30)  # read nothing before the spy looked
        client.shutdown(socket.SHUT_WR)
        seen["upstream"] = _all(upstream)
        upstream.shutdown(socket.SHUT_WR)
        seen["client"] = _all(client)

    spliced, up, down = _tunnel(body, first=b"hello", buffered=b" buffered")
    assert spliced
    assert seen["at start"] == b"hello buffered"
    assert seen["upstream"] == b"hello buffered"
    assert (up, down) == (len(b"hello buffered"), 0)


def test_twenty_megabytes_each_way_unchanged() -> None:
    size = 20 * 1024 * 1024
    data = os.urandom(size)
    want = hashlib.sha256(data).hexdigest()
    seen: dict[str, str] = {}

    def body(client: socket.socket, upstream: socket.socket) -> None:
        # Each side sends and reads at once: a side that sent all before reading would wait
        # on buffers the other side's unread bytes fill (the test's own deadlock).
        def send(sock: socket.socket) -> None:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)

        def read(sock: socket.socket, key: str) -> None:
            seen[key] = hashlib.sha256(_all(sock)).hexdigest()

        workers = [
            threading.Thread(target=send, args=(client,)),
            threading.Thread(target=send, args=(upstream,)),
            threading.Thread(target=read, args=(upstream, "up")),
            threading.Thread(target=read, args=(client, "down")),
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)

    spliced, up, down = _tunnel(body)
    assert spliced and seen == {"up": want, "down": want}
    assert up == down == size


def test_a_reset_upstream_ends_both_directions() -> None:
    seen: dict[str, object] = {}

    def body(client: socket.socket, upstream: socket.socket) -> None:
        client.sendall(b"request")
        seen["upstream"] = upstream.recv(100)
        # SO_LINGER 0: close sends RST, as an upstream that crashes
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        upstream.close()
        try:
            seen["client"] = _all(client)
        except ConnectionResetError:
            seen["client"] = "reset"

    spliced, up, _down = _tunnel(body)
    assert spliced and seen["upstream"] == b"request" and up == len(b"request")
    # The client's side ended too (EOF or reset), rather than hanging on a dead tunnel.
    assert seen["client"] in (b"", "reset")


def test_closing_the_proxy_ends_an_open_spliced_tunnel() -> None:
    """The proxy's end is the command's network's end (issue 24, bad input): a tunnel open
    and idle in the splice relay is cut when the proxy closes, and its record says why."""
    from sprawl_orch.egress.proxy import EgressProxy
    from sprawl_orch.egress.rules import Rules
    from tests.egress.upstream import connect_through, upstream

    with upstream(tls=True) as up:
        proxy = EgressProxy(Rules.parse((f"localhost:{up.port}", "127.0.0.1", "::1")))
        proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        address = listener.getsockname()
        proxy.serve(listener)
        status, sock = connect_through(address, f"localhost:{up.port}")
        assert status == 200
        # The handshake done, the tunnel idles in the relay (keep-alive: no request yet).
        tls = up.client_context().wrap_socket(sock, server_hostname="localhost")
        proxy.close()
        tls.settimeout(30)
        try:
            ended = tls.recv(100) == b""
        except (ssl.SSLError, ConnectionResetError):
            ended = True  # a cut without close_notify: also the end
        tls.close()
    assert ended
    (record,) = proxy.records()
    assert record.allowed and record.reason == "the proxy closed (the run ended)"
    assert record.bytes_up > 0 and record.bytes_down > 0  # the handshake went through
