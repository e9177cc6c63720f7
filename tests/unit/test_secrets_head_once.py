"""This round's shortcuts on the intercepted path (benchmarks/secrets_proxy.py), each against the
way it replaced: an answer's head scrubbed and written in one pass (head.answer) against
swap.scrub_head, the headers filtered and wire.response_head; a request's head in one pass
(head.Requests) against the hop-by-hop filter, swap_headers, the filters and
wire.request_head; and _head trusting llhttp's own
refusal of CR, LF and NUL in a field (wire.FIELDS_REFUSED) against joining and searching every
field of every message. Same bytes to the command, the same echo count, the same refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sprawl_orch.secrets import head, intercept, wire
from sprawl_orch.secrets.disguise import Marked, disguises
from sprawl_orch.secrets.intercept import _UNSCANNABLE
from sprawl_orch.secrets.swap import Bound, scrub_head, swap_headers
from tests.unit.test_secrets_path_once import SECRETS, _value
from tests.unit.test_secrets_scrub_once import PH, _echoes, values

FRAMING = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive"})
DROPS = [FRAMING, FRAMING - {b"content-length"}]


def _before(
    event: wire.Head, drop: frozenset[bytes], forms: dict[bytes, bytes], value: bytes
) -> tuple[bytes, bool] | None:
    """intercept._answer's head as it was: scrub_head, then each header filtered (the framing
    ones) or refused (a compressed answer), written by wire.response_head."""
    reason, scrubbed, found = scrub_head(event.reason, event.headers, forms, disguises(value, PH))
    headers = []
    for (key, _), (name, val) in zip(event.headers, scrubbed, strict=True):
        if key in drop:
            continue
        if name == b"content-encoding" and val.strip().lower() not in (b"identity", b""):
            return None
        headers.append((name, val))
    headers.append((b"content-length", b"12"))
    return wire.response_head(event.status, reason, headers), found


def _now(
    event: wire.Head, drop: frozenset[bytes], forms: dict[bytes, bytes], value: bytes
) -> tuple[bytes, bool] | None:
    got = head.answer(event, drop, forms, Marked(disguises(value, PH)))
    if got is None:
        return None
    return got[0] + b"\r\ncontent-length: 12\r\n\r\n", got[1]


NAMES = [b"x-echo", b"content-length", b"content-encoding", b"connection", b"server", b"x-b"]


@given(
    values,
    st.lists(st.integers(0, 4), max_size=60),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 11)), max_size=7),
    st.integers(0, 11),
    st.integers(0, 1),
    st.sampled_from([200, 401, 304, 204]),
)
def test_the_answer_head_in_one_pass_is_the_parsed_way(
    value: bytes,
    hows: list[int],
    rows: list[tuple[int, int]],
    reason: int,
    drop: int,
    status: int,
) -> None:
    # Values an answer's head may hold: plain, the value in any disguise, framing values,
    # an encoding (identity passes, gzip is refused), a separator in the reason.
    choices = [b"plain", b"", b"12", b"identity", b"gzip", b"close", *_echoes(value, hows)]
    reasons = [b"OK", b"bad \x01 sep", b"bad \x02", b"", *choices]
    headers = [(NAMES[k], choices[v % len(choices)]) for k, v in rows]
    watched = FRAMING | {b"content-encoding"}
    event = wire.Head(
        headers=headers,
        status=status,
        reason=reasons[reason % len(reasons)],
        special=[(k, v) for k, v in headers if k in watched],
    )
    forms = {value: PH, b"Bearer " + value: b"Bearer " + PH}
    assert _now(event, DROPS[drop], forms, value) == _before(event, DROPS[drop], forms, value)


def test_a_form_across_two_fields_is_scrubbed_in_each_field_alone() -> None:
    """A form holding a separator's place would match across a name and its value, or two
    headers, in the joined text: one_pass declines, the parsed way scrubs each piece."""
    value = b"real-value-for-the-test"
    headers = [(b"x-a", b"tail" + value), (b"x-b", b"c")]
    event = wire.Head(headers=headers, status=200, reason=b"OK")
    forms = {value: PH, b"x-a\0tail": b"CROSSED", b"c\x01x-b": b"CROSSED"}
    hidden = Marked(disguises(value, PH))
    assert head.one_pass(200, b"OK", headers, FRAMING, forms, hidden) is None
    assert _now(event, FRAMING, forms, value) == _before(event, FRAMING, forms, value)
    got = _now(event, FRAMING, forms, value)
    assert got is not None and b"x-a: tail" + PH in got[0] and b"CROSSED" not in got[0]


def test_a_line_end_in_a_reason_is_refused_as_before() -> None:
    event = wire.Head(headers=[(b"x", b"y")], status=200, reason=b"OK\r\nx-injected: 1")
    with pytest.raises(wire.Malformed):
        head.answer(event, FRAMING, {}, Marked(()))


def test_this_llhttp_refuses_a_broken_field_itself() -> None:
    """The shortcut is on (the per-message search is off) because the installed llhttp
    refuses each broken field: this says when an upgrade of httptools turns it off."""
    assert wire.refuses_broken_fields()
    assert wire.FIELDS_REFUSED


MESSAGES = [
    b"GET / HTTP/1.1\r\nhost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\nx: b\rc\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\nx: b\nc\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\nx: b\0c\r\n\r\n",
    b"GET / HTTP/1.1\r\nx\0y: b\r\n\r\n",
    b"GET / HTTP/1.1\r\nx: a\r\n folded\r\n\r\n",
    b"POST / HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\nabc",
    b"POST / HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\nabc",
    b"GET / HTTP/1.1\r\nx: " + b"a" * 70_000 + b"\r\n\r\n",
]


@given(
    st.lists(st.sampled_from(MESSAGES), min_size=1, max_size=3),
    st.integers(1, 80_000),
)
def test_the_reader_refuses_as_it_did_with_every_field_searched(
    messages: list[bytes], cut: int
) -> None:
    """The same events with FIELDS_REFUSED on and off, the bytes fed whole or in two reads
    (a head spread over reads is still held to HEAD_LIMIT)."""
    data = b"".join(messages)
    seen = []
    for refused in (True, False):
        wire.FIELDS_REFUSED = refused
        try:
            reader = wire.Reader(response=False)
            reader.feed(data[:cut])
            reader.feed(data[cut:])
            seen.append(list(reader.events))
        finally:
            wire.FIELDS_REFUSED = wire.refuses_broken_fields()
    assert seen[0] == seen[1]


HOP = intercept._HOP
SILENT = intercept._UNSCANNABLE | {b"expect"}


def _request_before(
    request: wire.Head, bound: tuple[Bound, ...], echoes: dict[bytes, bytes]
) -> tuple[bytes, set[str]] | None:
    """intercept._one's request as it was: hop-by-hop headers filtered, swap_headers, Expect
    and the unscannable ones left out, identity asked, wire.request_head (None: Malformed)."""
    raw = [(k, v) for k, v in request.headers if k not in HOP]
    headers, used = swap_headers(raw, bound, echoes)
    headers = [(k, v) for k, v in headers if k != b"expect" and k not in _UNSCANNABLE]
    headers.append((b"accept-encoding", b"identity"))
    try:
        return wire.request_head(request.method, request.target, headers), used
    except wire.Malformed:
        return None


REQUEST_NAMES = [
    b"host",
    b"authorization",
    b"x-api",
    b"accept-encoding",
    b"connection",
    b"expect",
    b"range",
    b"x-b",
    b"cookie",
    b"",
]


def _request_value(kind: int, secret: int, text: bytes) -> bytes:
    """Mostly values the one pass takes (plain, a placeholder in it, Bearer), some it declines
    (any Basic form: _value's)."""
    ph = SECRETS[secret % len(SECRETS)].placeholder
    if kind < 8:
        return [text, text + ph + text, b"Bearer " + ph, ph + ph, b"", ph, b"x" + ph][kind % 7]
    return _value(kind, secret, text)


@settings(max_examples=400)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(REQUEST_NAMES) - 1),
            st.integers(0, 12),
            st.integers(0, 2),
            st.binary(max_size=12),
        ),
        max_size=7,
    ),
    st.one_of(
        st.sampled_from([[0], [1], [2]]),
        st.lists(st.integers(0, 2), min_size=1, max_size=2, unique=True),
    ),
)
def test_the_request_in_one_pass_is_the_parsed_way(
    rows: list[tuple[int, int, int, bytes]], which: list[int]
) -> None:
    """Same bytes upstream, the same secrets counted as put in, the same echoes recorded (in
    the same order: the scrub's needles follow it), or declined."""
    headers = [(REQUEST_NAMES[n], _request_value(kind, s, text)) for n, kind, s, text in rows]
    request = wire.Head(headers=headers, method=b"GET", target=b"/t?x=1")
    bound = tuple(SECRETS[i] for i in which)
    fast: dict[bytes, bytes] = {}
    got = head.Requests(bound, HOP, SILENT).head(request, fast)
    plain: dict[bytes, bytes] = {}
    before = _request_before(request, bound, plain)
    if got is None:
        assert fast == {}
        return
    assert got == before
    assert list(fast.items()) == list(plain.items())


def test_a_request_with_its_placeholder_goes_the_one_pass_way() -> None:
    """The benchmark's request (and most): one bound secret, a Bearer placeholder, hop-by-hop
    and Accept-Encoding lines; not declined."""
    secret = SECRETS[0]
    request = wire.Head(
        headers=[
            (b"host", b"api.test"),
            (b"accept-encoding", b"gzip"),
            (b"connection", b"keep-alive"),
            (b"authorization", b"Bearer " + secret.placeholder),
        ],
        method=b"GET",
        target=b"/small",
    )
    echoes: dict[bytes, bytes] = {}
    got = head.Requests((secret,), HOP, SILENT).head(request, echoes)
    assert got == (
        b"GET /small HTTP/1.1\r\nhost: api.test\r\nauthorization: Bearer "
        + secret.value
        + b"\r\naccept-encoding: identity\r\n\r\n",
        {"A"},
    )
    assert echoes[b"Bearer " + secret.value] == b"Bearer " + secret.placeholder
