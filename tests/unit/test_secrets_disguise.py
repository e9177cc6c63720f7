"""The value escaped or inside base64 (secrets/disguise.py), found by the response scrub
whatever the escaper, the prefix before it in base64 and where the stream is cut."""

from __future__ import annotations

import base64
import html
from urllib.parse import unquote

from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.secrets.disguise import disguises
from sprawl_orch.secrets.swap import Scanner, scrub

PH = b"SPRAWL_PLACEHOLDER_T_" + b"a" * 32
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/+=-_.~:@!$*"

values = st.text(LETTERS, min_size=8, max_size=60).map(str.encode)


def _escape(byte: int, how: int) -> bytes:
    if bytes([byte]).isalnum():
        return bytes([byte])
    return [
        bytes([byte]),
        b"%%%02X" % byte,
        b"%%%02x" % byte,
        b"\\u%04X" % byte,
        b"\\u%04x" % byte,
        b"\\x%02x" % byte,
        b"&#%d;" % byte,
        b"&#x%x;" % byte,
        b"&#X%02X;" % byte,
        b"\\\\u%04x" % byte,  # escaped again (JSON inside JSON)
        b"%%25%02X" % byte,  # percent-encoded twice
        b"\\" + bytes([byte]),  # backslash-escaped
        b"\\\\\\" + bytes([byte]),  # and again
    ][how % 13]


def _fed(scanner: Scanner, data: bytes, cuts: list[int]) -> bytes:
    out, at = b"", 0
    for cut in cuts:
        out += scanner.feed(data[at : at + cut])
        at += cut
    return out + scanner.feed(data[at:]) + scanner.end()


@given(
    values,
    st.lists(st.integers(0, 12), min_size=60, max_size=60),
    st.booleans(),
    st.binary(max_size=50),
    st.lists(st.integers(1, 40), max_size=6),
)
def test_the_value_escaped_any_way_is_scrubbed(
    value: bytes, hows: list[int], upper: bool, around: bytes, cuts: list[int]
) -> None:
    written = b"".join(_escape(b, how) for b, how in zip(value, hows, strict=False))
    if upper:
        written = written.upper()
    data = around + written + around
    out = _fed(Scanner({value: PH}, disguises(value, PH)), data, cuts)
    assert PH in out
    plain = unquote(html.unescape(out.decode("latin-1"))).encode("latin-1", "replace")
    assert written not in out and value not in plain.replace(b"\\u00", b"%").replace(b"\\", b"")


@given(
    values,
    st.binary(max_size=20),
    st.binary(max_size=20),
    st.booleans(),
    st.lists(st.integers(1, 40), max_size=6),
)
def test_the_value_in_base64_after_any_prefix_is_scrubbed(
    value: bytes, prefix: bytes, suffix: bytes, urlsafe: bool, cuts: list[int]
) -> None:
    """`base64(user:value)` a command or the caller sent earlier: the user's length puts the
    value at any of three alignments; standard or URL-safe letters."""
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    decode = base64.urlsafe_b64decode if urlsafe else base64.b64decode
    blob = encode(prefix + value + suffix)
    out = _fed(Scanner({}, disguises(value, PH)), b"x " + blob + b" y", cuts)
    assert blob not in out
    text = out[2:-2]
    for start in range(4):  # every alignment the command could decode from
        piece = text[start:].rstrip(b"=")
        piece = piece[: len(piece) // 4 * 4]
        try:
            assert value not in decode(piece)
        except ValueError:
            continue


def test_a_short_value_has_no_base64_pattern_and_escapes_still_work() -> None:
    found = disguises(b"ab+c", PH)
    assert len(found) == 1  # under eight fixed letters: base64 would match unrelated data
    assert scrub(b"x ab%2Bc y", {}, found) == b"x " + PH + b" y"


def test_a_body_without_the_value_passes_unchanged() -> None:
    value = b"ghp_atk/value+" + b"9" * 20 + b"=="
    body = base64.b64encode(bytes(range(256)) * 20) + b" &#43; %2F \\u002B " + value[:-3]
    assert scrub(body, {value: PH}, disguises(value, PH)) == body


def test_a_stream_holds_back_only_what_an_escaped_value_can_span() -> None:
    """Each held byte delays a streamed answer (server-sent events): letters and digits are
    never escaped, so only the other bytes count ten."""
    value = b"sk-proj-" + b"A1" * 40
    (found, *_) = disguises(value, PH)
    assert found.widest == len(value) + 2 * 9


@given(
    st.text(LETTERS + "?>~", min_size=8, max_size=40).map(str.encode),
    st.binary(max_size=12),
    st.lists(st.integers(0, 6), min_size=80, max_size=80),
    st.lists(st.integers(1, 40), max_size=6),
)
def test_the_value_in_base64_with_its_plus_and_slash_escaped_is_scrubbed(
    value: bytes, prefix: bytes, hows: list[int], cuts: list[int]
) -> None:
    """A blob echoed inside JSON or a URL has its '+' and '/' escaped (PHP's \\/, ASP.NET's
    \\u002B, %2B): the pattern matched only the literal letters. Undone by the command, the
    scrubbed blob must not decode to the value at any alignment."""
    blob = base64.b64encode(prefix + value)
    forms = [
        lambda c: c,
        lambda c: b"\\" + c,
        lambda c: b"%%%02X" % c[0],
        lambda c: b"%%%02x" % c[0],
        lambda c: b"\\u%04X" % c[0],
        lambda c: b"&#%d;" % c[0],
        lambda c: b"%%25%02X" % c[0],
    ]
    written = b"".join(
        forms[how](bytes([c])) if c in b"+/" else bytes([c])
        for c, how in zip(blob, hows + [0] * len(blob), strict=False)
    )
    out = _fed(Scanner({}, disguises(value, PH)), b'{"a":"' + written + b'"}', cuts)
    text = unquote(unquote(html.unescape(out.decode("latin-1")))).encode("latin-1")
    text = text.replace(b"\\u002B", b"+").replace(b"\\u002F", b"/").replace(b"\\", b"")
    text = text[6:-2]
    for start in range(4):
        piece = text[start:].rstrip(b"=")
        piece = piece[: len(piece) // 4 * 4]
        try:
            assert value not in base64.b64decode(piece)
        except ValueError:
            continue
