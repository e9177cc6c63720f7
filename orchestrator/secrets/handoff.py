"""An intercepted connection, once both handshakes are done, on a thread of its own that blocks
on its two sockets (as the splice relay's threads do, egress/relay.py), instead of the proxy's
loop: the loop woke three times per small request (the request, the answer's head, its body),
each an epoll round and a callback on a thread that a loaded machine deschedules at every
wake-up. The loop keeps accept, CONNECT and the handshakes.

The streams are paused and flushed first, and what they had read but not handed out goes to
the TLS ends ahead of anything read from the sockets (relay.take_over). Cancelled (the proxy's
close, or its death), both sockets are shut down, which returns the thread's blocked read or
write, and the thread is waited for: the flow closes the descriptors only after it returned,
so no thread reads a closed (and reused) descriptor number, and the record's byte counts are
final when the flow writes them."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable

from sprawl_orch.egress import relay

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class NoHandoff(Exception):
    """The connection could not be moved to a thread (said in the flow's record)."""


async def on_thread(
    client: Stream, upstream: Stream, work: Callable[[int, bytes, int, bytes], None]
) -> None:
    """Run `work(client_fd, client_early, upstream_fd, upstream_early)` on a thread of its own,
    both descriptors blocking; what it raised is raised here, in the flow."""
    client_sock, upstream_sock = relay.socket_of(client[1]), relay.socket_of(upstream[1])
    if client_sock is None or upstream_sock is None:
        raise NoHandoff("an intercepted connection's socket could not be taken over")
    from_client = await relay.take_over(*client)
    from_upstream = await relay.take_over(*upstream)
    if from_client is None or from_upstream is None:
        # Both are plain TCP streams from start_server/open_connection; this only guards a
        # loop that hands out something else.
        raise NoHandoff("an intercepted connection's stream could not be taken over")
    # O_NONBLOCK is the open file's; TransportSocket refuses setblocking(True). The
    # transports are paused with nothing left to write and close only after the thread
    # returned (below).
    client_fd, upstream_fd = client_sock.fileno(), upstream_sock.fileno()
    os.set_blocking(client_fd, True)
    os.set_blocking(upstream_fd, True)
    failed: list[BaseException] = []

    def session() -> None:
        try:
            work(client_fd, from_client, upstream_fd, from_upstream)
        except BaseException as err:  # handed to the flow, which records it
            failed.append(err)

    def start(job: Callable[[], None]) -> None:
        threading.Thread(target=job, name="sprawl-secrets-session", daemon=True).start()

    try:
        await relay.carried(session, start, (client_sock, upstream_sock))
    except RuntimeError:  # "can't start new thread": the connection ends, recorded
        raise NoHandoff("no thread could be started for an intercepted connection") from None
    if failed:
        raise failed[0]
