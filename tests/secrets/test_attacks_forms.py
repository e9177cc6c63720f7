"""The value coming back to the command in a form the scrub did not list: escaped the way a
common server framework escapes it (not only the percent-encoded and `\\/` forms), or inside
a Basic blob the run did not send itself (a stored echo of another command's, or the caller's
own git, request). Real proxy, raw TLS upstream on 127.0.0.1 (tests/secrets/raw.py)."""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest

from tests.secrets.raw import Handler, raw_upstream
from tests.secrets.test_attacks import VALUE, Rig, _auth_of, _body, _reply

# VALUE holds '/', '+' and '=' (a standard base64 key's letters): each framework below writes
# at least one of them escaped.


def _dotnet_json(token: str) -> bytes:
    # System.Text.Json's default encoder (ASP.NET Core) escapes '+' (and HTML's <>&'") as \uXXXX.
    return b'{"token":"' + token.replace("+", "\\u002B").encode() + b'"}'


def _go_html(token: str) -> bytes:
    # Go's html/template escapes '+' as &#43; in text; '=' as &#61; inside an attribute.
    text = token.replace("+", "&#43;")
    return f'<p>bad token {text}</p><a href="x" title={text.replace("=", "&#61;")}>'.encode()


def _python_quote(token: str) -> bytes:
    # urllib.parse.quote's default keeps '/' (a redirect's next= built with it).
    return quote(token).encode()


def _go_path_escape(token: str) -> bytes:
    # Go's url.PathEscape escapes '/' but keeps '+' and '='.
    return token.replace("/", "%2F").encode()


def _lower_hex(token: str) -> bytes:
    # Percent-encoding with lower-case hex digits (RFC 3986 §2.1 makes them equivalent).
    return re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(token, safe="")).encode()


def _upper(token: str) -> bytes:
    # An error page that shouts the header it refused.
    return ("INVALID CREDENTIAL: " + token.upper()).encode()


def _json_in_json(token: str) -> bytes:
    # A stored echo served as a JSON string inside JSON (a request bin's "raw" field), PHP's
    # json_encode both times: '/' became \/ and then \\\/, '+' as \u002B became \\u002B.
    inner = '{"token":"' + token.replace("/", "\\/").replace("+", "\\u002B") + '"}'
    return json.dumps({"raw": inner}).replace("/", "\\/").encode()


def _double_percent(token: str) -> bytes:
    # A redirect's next= inside another URL's query: percent-encoded twice (%2F -> %252F).
    return quote(quote(token, safe=""), safe="").encode()


FORMS = {
    "dotnet_json": (_dotnet_json, lambda b: json.loads(b)["token"].encode()),
    "go_html": (_go_html, lambda b: html.unescape(b.decode()).encode()),
    "python_quote": (_python_quote, lambda b: unquote(b.decode()).encode()),
    "go_path_escape": (_go_path_escape, lambda b: unquote(b.decode()).encode()),
    "lower_hex": (_lower_hex, lambda b: unquote(b.decode()).encode()),
    "upper": (_upper, lambda b: b),
    "json_in_json": (_json_in_json, lambda b: json.loads(json.loads(b)["raw"])["token"].encode()),
    "double_percent": (_double_percent, lambda b: unquote(unquote(b.decode())).encode()),
}


def _as(form: str) -> Handler:
    encode = FORMS[form][0]

    def handler(head: bytes, earlier: list[bytes]) -> bytes:
        token = _auth_of(head).decode()
        text = encode(token)
        return _reply(text, b"location: /login?next=" + text.replace(b'"', b"") + b"&x=1")

    return handler


@pytest.fixture
def two_runs(tmp_path: Path) -> Iterator[tuple[Rig, Rig]]:
    """Two commands (two runs: two placeholders, two CAs, two proxies), one bound host that
    keeps request heads and serves the last one back at /last (a request bin)."""

    def stored(head: bytes, earlier: list[bytes]) -> bytes:
        if b"GET /last" in head and earlier:
            return _reply(earlier[-1])
        return _reply(b"ok")

    with raw_upstream(stored) as up:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        rigs = (Rig(up, tmp_path / "a"), Rig(up, tmp_path / "b"))
        try:
            yield rigs
        finally:
            for r in rigs:
                r.proxy.close()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_value_escaped_as_frameworks_escape_it_is_scrubbed(tmp_path: Path, form: str) -> None:
    """Only the raw value, its fully percent-encoded forms and `\\/` were scrubbed: the same
    echo written by ASP.NET Core's JSON, Go's html/template, Python's quote(), Go's
    PathEscape, lower-case hex or upper-cased came back one unescape away from the value."""
    decode = FORMS[form][1]
    with raw_upstream(_as(form)) as up:
        rig = Rig(up, tmp_path)
        try:
            got = rig.send(
                "GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
                "Connection: close\r\n\r\n"
            )
        finally:
            rig.proxy.close()
    assert VALUE.encode() in rig.received()  # the bound host did get it
    assert got.startswith(b"HTTP/1.1 200"), got
    body = _body(got)
    location = next(
        line.split(b"next=", 1)[1].rsplit(b"&x=1", 1)[0]
        for line in got.split(b"\r\n\r\n")[0].split(b"\r\n")
        if line.lower().startswith(b"location:")
    )
    for text in (body, location):
        try:
            plain = decode(text)
        except (ValueError, KeyError):
            plain = text  # the scrub broke the syntax: what is left is read as it is
        assert VALUE.encode() not in plain and VALUE.upper().encode() not in plain, text


def _decoded_blobs(text: bytes) -> bytes:
    """Every base64 run in `text`, decoded (garbage where it does not decode)."""
    out = []
    for run in re.findall(rb"[A-Za-z0-9+/]{8,}={0,2}", text):
        for cut in range(4):
            piece = run[cut:]
            piece = piece[: len(piece) - len(piece.rstrip(b"=")) or None]
            piece = piece.rstrip(b"=")
            piece += b"=" * (-len(piece) % 4)
            try:
                out.append(base64.b64decode(piece))
            except (binascii.Error, ValueError):
                continue
    return b"\n".join(out)


@pytest.mark.parametrize("user", ["x-access-token", "oauth2", "user", ""])
def test_a_basic_blob_another_command_sent_is_scrubbed(
    two_runs: tuple[Rig, Rig], user: str
) -> None:
    """git's `Basic base64(user:placeholder)` is swapped and re-encoded: the re-encoded blob was
    scrubbed only in the run that sent it (its own list of what it put on the wire). A later
    command (a new run, same value) fetching the bound host's stored echo got the blob, one
    `base64 -d` away from the value. The user name sets where the value falls in base64's
    3-byte groups: each of the three alignments (and none at all)."""
    first, second = two_runs
    blob = base64.b64encode(f"{user}:{first.ph}".encode() if user else first.ph.encode())
    first.send(
        f"GET /store HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Basic {blob.decode()}\r\n"
        "Connection: close\r\n\r\n"
    )
    sent = _auth_of(first.up.heads[0])
    assert VALUE.encode() in base64.b64decode(sent)  # the bound host did get it
    got = second.send("GET /last HTTP/1.1\r\nHost: localhost:PORT\r\nConnection: close\r\n\r\n")
    body = _body(got)
    assert got.startswith(b"HTTP/1.1 200") and b"authorization" in body.lower(), got
    assert sent not in body, body
    assert VALUE.encode() not in _decoded_blobs(body), body


@pytest.mark.parametrize(
    "spelled",
    [
        lambda ph: quote(ph, safe="").replace("_", "%5F"),  # percent-encoded
        lambda ph: base64.b64encode(ph.encode()).decode(),  # base64, no Basic scheme
        lambda ph: base64.urlsafe_b64encode(b"k=" + ph.encode()).decode().rstrip("="),
        lambda ph: ph.lower(),
    ],
)
def test_a_placeholder_sent_disguised_is_still_counted(tmp_path: Path, spelled: Any) -> None:
    """docs/secrets.md: a placeholder sent where it is never swapped "is counted as an
    attempted leak". Only its plain spelling was: percent-encoded or base64 in the URL it
    went out uncounted, and the result said 0 attempted leaks."""
    with raw_upstream(_as("upper")) as up:
        rig = Rig(up, tmp_path)
        try:
            hidden = spelled(rig.ph)
            rig.send(
                f"GET /?t={hidden} HTTP/1.1\r\nHost: localhost:PORT\r\nConnection: close\r\n\r\n"
            )
        finally:
            rig.proxy.close()
    assert hidden.encode() in rig.received()  # it went out as written
    leaks = rig.run.report()["attempted_leaks"]
    assert [leak["where"] for leak in leaks] == ["url (never swapped)"], leaks
