"""wire.py (the interception's HTTP/1.1, llhttp through httptools) on bytes alone: what it
refuses, what it hands out in order, and that nothing it writes can carry a line break."""

from __future__ import annotations

import pytest

from sprawl_orch.secrets import wire


def _kinds(data: bytes, *, response: bool = False, no_body: bool = False) -> list[str]:
    reader = wire.Reader(response=response)
    reader.no_body = no_body
    reader.feed(data)
    return [type(e).__name__ for e in reader.events]


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 4\r\nTransfer-Encoding: chunked",
        b"Content-Length: 4\r\nContent-Length: 4",
        b"Content-Length: 4, 4",
        b"Transfer-Encoding: gzip, chunked",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
        b"X-A: b\r\n c",
        b"Host : a",
        b"X-A: a\x00b",
    ],
)
def test_framing_two_readers_could_disagree_on_is_refused(head: bytes) -> None:
    data = b"POST / HTTP/1.1\r\nHost: a\r\n" + head + b"\r\n\r\n0\r\n\r\n"
    assert _kinds(data) == ["Bad"]


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\nHost: a\n\n",
        b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
        b"GET /\r\n\r\n",
        b"CONNECT evil:443 HTTP/1.1\r\nHost: evil:443\r\n\r\n",
    ],
)
def test_not_http_1_is_refused(data: bytes) -> None:
    assert _kinds(data) == ["Bad"]


def test_a_refusal_comes_after_what_was_read_before_it() -> None:
    """Pipelined: the first request is served, the refusal is its own later event."""
    data = (
        b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
    )
    assert _kinds(data) == ["Head", "End", "Bad"]


def test_a_request_after_an_upgrade_request_is_read_on() -> None:
    data = (
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"
        b"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n"
    )
    assert _kinds(data) == ["Head", "End", "Head", "End"]


def test_a_head_in_pieces_is_one_head() -> None:
    reader = wire.Reader(response=False)
    data = b"GET /p HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PLACEHOLDER\r\n\r\n"
    for i in range(len(data)):
        reader.feed(data[i : i + 1])
    head = reader.events[0]
    assert isinstance(head, wire.Head)
    assert head.target == b"/p"
    assert head.headers == [(b"host", b"a"), (b"authorization", b"Bearer PLACEHOLDER")]


def test_a_head_over_the_limit_in_many_reads_is_refused() -> None:
    reader = wire.Reader(response=False)
    reader.feed(b"GET / HTTP/1.1\r\nX-Pad: ")
    for _ in range(wire.HEAD_LIMIT // 1024 + 2):
        reader.feed(b"a" * 1024)
    assert [type(e).__name__ for e in reader.events] == ["Bad"]


def test_responses_without_a_body_and_until_close() -> None:
    assert _kinds(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", response=True, no_body=True) == [
        "Head",
        "End",
    ]
    assert _kinds(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", response=True) == [
        "Head",
        "End",
    ]
    reader = wire.Reader(response=True)
    reader.feed(b"HTTP/1.1 200 OK\r\n\r\nbody")
    assert isinstance(reader.eof(), wire.End)
    reader = wire.Reader(response=True)
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nbody")
    assert isinstance(reader.eof(), wire.Closed)  # cut short: not an end


def test_a_101_is_refused() -> None:
    data = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
    assert _kinds(data, response=True) == ["Bad"]


@pytest.mark.parametrize("bad", [b"v\r\nX-Injected: 1", b"v\nx", b"v\rx", b"v\x00"])
def test_nothing_written_carries_a_line_break(bad: bytes) -> None:
    with pytest.raises(wire.Malformed):
        wire.request_head(b"GET", b"/", [(b"authorization", bad)])
    with pytest.raises(wire.Malformed):
        wire.response_head(200, b"OK", [(b"x-echo", bad)])
    with pytest.raises(wire.Malformed):
        wire.response_head(200, bad, [])
    assert (
        wire.request_head(b"GET", b"/", [(b"host", b"a")]) == b"GET / HTTP/1.1\r\nhost: a\r\n\r\n"
    )


@pytest.mark.parametrize("bad", [b"x\r\nX-Injected", b"x\n", b"x\r", b"x\x00", b""])
def test_no_header_name_written_carries_a_line_break_or_is_empty(bad: bytes) -> None:
    """The check counts line ends over the message written (wire._lines): a name counts as a
    value does, and a target too."""
    with pytest.raises(wire.Malformed):
        wire.request_head(b"GET", b"/", [(b"host", b"a"), (bad, b"v")])
    with pytest.raises(wire.Malformed):
        wire.response_head(200, b"OK", [(bad, b"v")])
    with pytest.raises(wire.Malformed):
        wire.request_head(b"GET", b"/" + bad[1:] + b"\n", [(b"host", b"a")])
