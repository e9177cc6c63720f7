"""The value coming back to the command in a form the scrub did not list: escaped the way a
common server framework escapes it (not only the percent-encoded and `\\/` forms). Real
proxy, raw TLS upstream on 127.0.0.1 (tests/secrets/raw.py)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
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


FORMS = {
    "dotnet_json": (_dotnet_json, lambda b: json.loads(b)["token"].encode()),
    "go_html": (_go_html, lambda b: html.unescape(b.decode()).encode()),
    "python_quote": (_python_quote, lambda b: unquote(b.decode()).encode()),
    "go_path_escape": (_go_path_escape, lambda b: unquote(b.decode()).encode()),
    "lower_hex": (_lower_hex, lambda b: unquote(b.decode()).encode()),
    "upper": (_upper, lambda b: b),
}


def _as(form: str) -> Handler:
    encode = FORMS[form][0]

    def handler(head: bytes, earlier: list[bytes]) -> bytes:
        token = _auth_of(head).decode()
        text = encode(token)
        return _reply(text, b"location: /login?next=" + text.replace(b'"', b"") + b"&x=1")

    return handler


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
