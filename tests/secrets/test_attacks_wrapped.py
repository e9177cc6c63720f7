"""Attacks on the response scrub with base64 as encoders write it in lines: Ruby's
Base64.encode64 (60 letters a line), Python's base64.encodebytes and MIME (76), OpenSSL's
`base64` and PEM (64), each line ended by LF (written `\\n` inside a JSON string). A stored
echo of the request's Authorization header so encoded came back with the value's letters cut
by a line end: the base64 pattern wants them contiguous, and `base64 -d` (which skips line
ends) gave the value. And the value with its punctuation written by HTML5 name.
Real proxy, raw TLS upstream on 127.0.0.1 (tests/secrets/raw.py)."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.secrets.raw import Handler, raw_upstream
from tests.secrets.test_attacks import VALUE, Rig, _auth_of, _body, _reply
from tests.secrets.test_attacks_scrub import QVALUE


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    made = []

    def make(handler: Handler, value: str = VALUE) -> Rig:
        upstream = raw_upstream(handler)
        rig = Rig(upstream.__enter__(), tmp_path, value)
        made.append((rig, upstream))
        return rig

    yield make
    for rig, upstream in made:
        rig.proxy.close()
        upstream.__exit__(None, None, None)


def _lines(data: bytes, width: int) -> bytes:
    flat = base64.b64encode(data)
    return b"".join(flat[i : i + width] + b"\n" for i in range(0, len(flat), width))


def _wrapped(width: int, skip: int, how: str) -> Handler:
    """The header line as received, after `skip` bytes of other stored fields, base64 in
    lines of `width`; in a JSON string, raw, or past the size read whole (streamed)."""

    def reply(head: bytes, earlier: list[bytes]) -> bytes:
        blob = _lines(b"x" * skip + b"authorization: Bearer " + _auth_of(head), width)
        if how == "json":
            return _reply(json.dumps({"raw": blob.decode()}).encode())
        if how == "streamed":
            return _reply(b"y" * (70 * 1024) + blob)
        return _reply(blob)

    return reply


@pytest.mark.parametrize("how", ["raw", "json", "streamed"])
@pytest.mark.parametrize("width", [60, 64, 76])
@pytest.mark.parametrize("skip", [0, 1, 2, 20, 21, 22])
def test_the_value_in_line_wrapped_base64_is_scrubbed(
    make_rig: Callable[..., Rig], how: str, width: int, skip: int
) -> None:
    rig = make_rig(_wrapped(width, skip, how))
    got = rig.send(
        "GET /stored HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert got.startswith(b"HTTP/1.1 200"), got
    body = _body(got)
    text = json.loads(body)["raw"].encode() if how == "json" else body.lstrip(b"y")
    assert VALUE.encode() not in base64.b64decode(text.replace(b"\n", b"")), body[-300:]
    assert rig.run.report()["echoes_scrubbed"], rig.run.report()


# PHP's htmlentities($text, ENT_QUOTES | ENT_HTML5) writes every ASCII character that has an
# HTML5 name by its name (`http&colon;&sol;&sol;`): a debug page so escaping the request's
# headers. The disguises knew only the five XML names and numeric references.
_HTML5 = {"_": "&lowbar;", "/": "&sol;", "+": "&plus;", "=": "&equals;", ":": "&colon;"}


@pytest.mark.parametrize("underscore", ["&lowbar;", "&UnderBar;"])
@pytest.mark.parametrize("where", ["body", "streamed", "blob"])
def test_the_value_in_html5_named_references_is_scrubbed(
    make_rig: Callable[..., Rig], underscore: str, where: str
) -> None:
    names = {**_HTML5, "_": underscore}

    def page(head: bytes, earlier: list[bytes]) -> bytes:
        text = "authorization: Bearer " + _auth_of(head).decode()
        if where == "blob":  # a Basic blob's '+' and '/' so named (QVALUE's has both)
            text = base64.b64encode(b"git:" + _auth_of(head)).decode()
        html = "".join(names.get(c, c) for c in text).encode()
        return _reply((b"y" * (70 * 1024) if where == "streamed" else b"") + b"<pre>" + html)

    value = QVALUE if where == "blob" else VALUE
    assert b"+" in base64.b64encode(b"git:" + QVALUE.encode())  # what the names hide
    rig = make_rig(page, value)
    got = rig.send(
        "GET /debug HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert got.startswith(b"HTTP/1.1 200"), got
    text = html.unescape(_body(got).decode()).split("<pre>")[1].encode()
    if where == "blob":
        text = base64.b64decode(text + b"=" * (-len(text) % 4))
    assert value.encode() not in text, text
    assert rig.run.report()["echoes_scrubbed"], rig.run.report()
