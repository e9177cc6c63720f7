"""The proxy's close ends every connection, also one whose client stopped reading: against the
real proxy and a real plain-HTTP upstream on 127.0.0.1 (the attacker of the kept threads).

Was a break: a forwarded response the command did not read sat in the client transport's write
buffer; the flow's cancel closed the transport, which waits to flush before it closes its
socket, and the loop stopped first. The connection to the command and its descriptor outlived
the proxy's close (until the transport was garbage-collected: "unclosed transport")."""

from __future__ import annotations

import socket

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from tests.egress.upstream import upstream


def _until_end(sock: socket.socket) -> bool:
    """True once the connection ended (EOF or reset) within the socket's timeout."""
    try:
        while sock.recv(1 << 20):
            pass
    except (TimeoutError, OSError) as err:
        return not isinstance(err, TimeoutError)
    return True


def test_close_ends_connections_whose_client_does_not_read() -> None:
    with upstream(tls=False) as up:
        proxy = EgressProxy(Rules.parse((f"localhost:{up.port}", "127.0.0.1", "::1")))
        proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        proxy.serve(listener)
        head = (
            f"GET http://localhost:{up.port}/bytes/50000000 HTTP/1.1\r\n"
            f"host: localhost:{up.port}\r\n\r\n"
        ).encode()
        clients = []
        for _ in range(3):
            sock = socket.create_connection(listener.getsockname(), timeout=30)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(head)
            clients.append(sock)
        # Each response is under way (its first bytes reached the client) before the close.
        for sock in clients:
            assert sock.recv(4096).startswith(b"HTTP/1.")
        proxy.close()
        for sock in clients:
            sock.settimeout(10)
        ended = [_until_end(sock) for sock in clients]
        for sock in clients:
            sock.close()
        assert ended == [True, True, True]
        records = proxy.records()
        assert len(records) == 3 and all(r.reason.startswith("the proxy closed") for r in records)
