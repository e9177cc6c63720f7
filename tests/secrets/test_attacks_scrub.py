"""Attacks on the response scrub and the counting (issue 25) with inputs the other attack
files did not try: a value whose base64 holds '+' or '/' echoed inside a blob a server
escapes (PHP's JSON, ASP.NET Core's JSON, a URL's query), and placeholders sent where the
counting did not look. Real proxy, raw TLS upstream on 127.0.0.1 (tests/secrets/raw.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.secrets.raw import Handler, Raw, raw_upstream
from tests.secrets.test_attacks import Rig, _auth_of, _body, _reply
from tests.secrets.test_attacks_wire import _pieces

# A password with '?' and '~': base64 writes each as a 6-bit group of 62 or 63 ('+', '/'),
# whatever the user before it. Plain ASCII letters, digits, '_', '/', '+' and '=' never give
# either (tests/secrets/test_attacks.py's VALUE has none: its blobs hold no '+' or '/').
QVALUE = "pw_Summer?2026~release~key?x"


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    made: list[tuple[Rig, Iterator[Raw]]] = []

    def make(handler: Handler, value: str = QVALUE, others: tuple[str, ...] = ()) -> Rig:
        upstream = raw_upstream(handler)
        rig = Rig(upstream.__enter__(), tmp_path, value, others)
        made.append((rig, upstream))  # type: ignore[arg-type]
        return rig

    yield make
    for rig, upstream in made:
        rig.proxy.close()
        upstream.__exit__(None, None, None)  # type: ignore[attr-defined]


def _php_json(blob: bytes) -> bytes:
    # PHP's json_encode (a request bin's "headers" page): '/' written as \/.
    return json.dumps({"authorization": "Basic " + blob.decode()}).replace("/", "\\/").encode()


def _aspnet_json(blob: bytes) -> bytes:
    # System.Text.Json's default encoder: '+' as \u002B.
    return json.dumps({"authorization": "Basic " + blob.decode()}).replace("+", "\\u002B").encode()


def _query(blob: bytes) -> bytes:
    # A login page's next= or a redirect's query: the blob percent-encoded.
    return b"/login?auth=" + blob.replace(b"+", b"%2B").replace(b"/", b"%2F")


def _unescaped(body: bytes, how: str) -> bytes:
    if how == "query":
        return unquote(body.decode().split("auth=")[1]).encode()
    return json.loads(body)["authorization"].split(" ")[1].encode()


@pytest.mark.parametrize("how", ["php", "aspnet", "query"])
@pytest.mark.parametrize("user", ["x-access-token", "git", "ab"])
def test_a_basic_blob_with_escaped_plus_or_slash_is_scrubbed(
    make_rig: Callable[..., Rig], how: str, user: str
) -> None:
    """git's `Basic base64(user:placeholder)` swapped and re-encoded, echoed back by the bound
    host inside JSON or a URL: the server escapes the blob's '+' or '/'. Neither the blob the
    run sent (an exact form) nor the base64 pattern (literal letters) matched; the command's
    json.loads and one `base64 -d` gave the value. Each user length is one alignment."""
    write = {"php": _php_json, "aspnet": _aspnet_json, "query": _query}[how]

    def echo_blob(head: bytes, earlier: list[bytes]) -> bytes:
        return _reply(write(_auth_of(head)))

    rig = make_rig(echo_blob)
    blob = base64.b64encode(f"{user}:{rig.ph}".encode()).decode()
    got = rig.send(
        f"GET /headers HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Basic {blob}\r\n"
        "Connection: close\r\n\r\n"
    )
    sent = _auth_of(rig.up.heads[0])
    assert QVALUE.encode() in base64.b64decode(sent)  # the bound host did get it
    assert b"+" in sent or b"/" in sent  # and the blob has a letter servers escape
    body = _body(got)
    assert got.startswith(b"HTTP/1.1 200"), got
    back = _unescaped(body, how)
    assert QVALUE.encode() not in base64.b64decode(back + b"=" * (-len(back) % 4)), body
    assert rig.run.report()["echoes_scrubbed"], rig.run.report()


def _ok(head: bytes, earlier: list[bytes]) -> bytes:
    return _reply(b"ok")


def _upstream_saw(rig: Rig, what: bytes) -> bool:
    return any(what in head for head in rig.up.heads)


def test_a_body_placeholder_forwarded_before_the_request_is_cut_is_counted(
    make_rig: Callable[..., Rig],
) -> None:
    """A chunked POST whose first chunk holds the placeholder: the proxy forwards that chunk
    upstream while it waits for the next, then the command sends a malformed chunk and the
    request is cut. The body's placeholders were counted only once the request was whole: the
    upstream had the placeholder and the result said 0 attempted leaks."""
    rig = make_rig(_ok)
    # The chunk ends in a blank line so raw.py's upstream, which keeps what precedes one,
    # keeps the forwarded chunk.
    chunk = b"token=" + rig.ph.encode() + b"\r\n\r\n"
    # each piece its own record, 0.3 s apart: the proxy forwards the first before the next
    pieces = [
        b"POST /b HTTP/1.1\r\nHost: localhost:" + str(rig.up.port).encode() + b"\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(chunk) + chunk + b"\r\n",
        b"zz-not-a-chunk-size\r\n\r\n",
    ]
    _pieces(rig, [piece.decode() for piece in pieces], pause=0.3)
    assert _upstream_saw(rig, b"token=" + rig.ph.encode())
    assert [leak["where"] for leak in rig.run.report()["attempted_leaks"]] == [
        "request body (never swapped)"
    ], rig.run.report()


@pytest.mark.parametrize(
    ("line", "where"),
    [
        # llhttp hands names lower-cased: the placeholder as a name is never swapped.
        ("PH: 1", "a header's name (never swapped)"),
        ("X-<NPM_TOKEN>: 1", "a header's name (never swapped)"),
    ],
)
def test_a_placeholder_the_swap_leaves_in_a_header_is_counted(
    make_rig: Callable[..., Rig], line: str, where: str
) -> None:
    """docs/secrets.md: every placeholder seen where it is never swapped is counted. Headers
    were looked at for another secret's placeholder in a value only: one in a header's name
    (a valid token) reached the upstream uncounted."""
    rig = make_rig(_ok, others=("NPM_TOKEN",))
    got = rig.send(
        f"GET /h HTTP/1.1\r\nHost: localhost:PORT\r\n{line}\r\nConnection: close\r\n\r\n"
    )
    assert got.startswith(b"HTTP/1.1 200"), got
    secret = "NPM_TOKEN" if "NPM" in line else "GH_PAT"
    sent = rig.run.env()[secret].lower().encode()
    assert _upstream_saw(rig, sent) or _upstream_saw(rig, sent.upper())  # it went out
    assert rig.run.report()["attempted_leaks"] == [
        {"secret": secret, "host": f"localhost:{rig.up.port}", "where": where}
    ], rig.run.report()


def test_a_placeholder_as_a_plain_requests_header_name_is_counted(
    make_rig: Callable[..., Rig],
) -> None:
    """The plain-HTTP path (egress/proxy.py hands it the request's headers) looked at values."""
    rig = make_rig(_ok)
    rig.run.plain_request("example.org", b"/", [(rig.ph.lower().encode(), b"1")])
    assert [leak["where"] for leak in rig.run.report()["attempted_leaks"]] == [
        "plain HTTP header name (never swapped)"
    ]


def _in_a_header(head: bytes, earlier: list[bytes]) -> bytes:
    # A debug header quoting the credential it got (the body says nothing).
    return _reply(b"ok", b"x-debug-auth: " + _auth_of(head))


def test_an_echo_in_a_response_header_is_counted_as_scrubbed(
    make_rig: Callable[..., Rig],
) -> None:
    """docs/secrets.md: `echoes_scrubbed` counts every response in which the value came back
    and was scrubbed. Only a body's scrub was counted: the value in a header (or the reason)
    was scrubbed and the result said no echo."""
    rig = make_rig(_in_a_header)
    got = rig.send(
        "GET /e HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert b"x-debug-auth: " + rig.ph.encode() in got, got
    assert QVALUE.encode() not in got
    assert rig.run.report()["echoes_scrubbed"] == {f"localhost:{rig.up.port}": 1}


def _chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _framed(how: str) -> Handler:
    """The value (QVALUE, as the proxy sent it) echoed with a framing the fast paths assume
    things about: the whole-body size bound, chunk boundaries, escaped across chunks."""

    def reply(head: bytes, earlier: list[bytes]) -> bytes:
        value = _auth_of(head)
        if how == "whole-edge":  # exactly the largest body read whole, the value at its end
            body = b"x" * (64 * 1024 - len(value)) + value
        elif how == "past-whole":  # one byte more: streamed, the value across 64 KiB
            body = b"x" * (64 * 1024 - len(value) // 2) + value + b"y" * 7
        else:
            body = b"a" * 3 + (value.replace(b"~", b"%7E") if how == "escaped-chunks" else value)
        if how in ("chunks", "escaped-chunks"):
            return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + _chunked(body, 3)
        return _reply(body)

    return reply


@pytest.mark.parametrize("how", ["whole-edge", "past-whole", "chunks", "escaped-chunks"])
def test_the_value_framed_at_a_fast_paths_edge_is_scrubbed(
    make_rig: Callable[..., Rig], how: str
) -> None:
    """Tried against the per-request fast paths (passed before and after): a body of exactly
    the size read whole with the value at its last byte, one of WHOLE + 1 the value across
    64 KiB, the value (and percent-escaped) in 3-byte chunks."""
    rig = make_rig(_framed(how))
    got = rig.send(
        "GET /f HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    body = _body(got)
    assert got.startswith(b"HTTP/1.1 200") and body.endswith((rig.ph.encode(), b"y" * 7)), got
    assert QVALUE.encode() not in unquote(body.decode()).encode()
    assert rig.run.report()["echoes_scrubbed"]
