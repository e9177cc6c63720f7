"""The response scrub run once over a whole piece (swap.scrub_found: a small answer's body, the
head joined by LF in swap.scrub_head) and the disguises' length floor
(Disguise.shortest): each gives what the streaming Scanner and the piece-by-piece scrub gave,
found or not, and the floor never skips a text a disguise matches."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets import wire
from sprawl_orch.secrets.disguise import disguises
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from sprawl_orch.secrets.swap import Scanner, scrub_found, scrub_head

PH = b"SPRAWL_PLACEHOLDER_T_" + b"a" * 32
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/+=-_.~:@!$*"
values = st.text(LETTERS, min_size=8, max_size=60).map(str.encode)


def _escape(value: bytes, hows: list[int]) -> bytes:
    out = b""
    for byte, how in zip(value, hows, strict=False):
        plain = bytes([byte])
        if plain.isalnum():
            out += plain
            continue
        out += [plain, b"%%%02X" % byte, b"\\u%04x" % byte, b"&#%d;" % byte, b"\\" + plain][how % 5]
    return out


def _echoes(value: bytes, hows: list[int]) -> list[bytes]:
    """The value as an echo could hold it: plain, escaped, in capitals, in base64 after a
    prefix of each alignment (standard and URL-safe)."""
    escaped = _escape(value, hows + [0] * len(value))
    return [
        value,
        escaped,
        escaped.upper(),
        *(base64.b64encode(b"u:"[:n] + value) for n in range(3)),
        *(base64.urlsafe_b64encode(b"us:"[:n] + value + b"?") for n in range(3)),
    ]


@given(values, st.lists(st.integers(0, 4), max_size=60), st.binary(max_size=30), st.data())
def test_scrub_found_is_the_scanner_fed_the_whole_piece(
    value: bytes, hows: list[int], around: bytes, data: st.DataObject
) -> None:
    echoes = _echoes(value, hows)
    chosen = data.draw(st.lists(st.sampled_from(echoes), max_size=4))
    text = around + around.join(chosen) + around
    forms = {value: PH, b"Bearer " + value: b"Bearer " + PH}
    found = disguises(value, PH)
    scanner = Scanner(forms, found)
    streamed = scanner.feed(text) + scanner.end()
    assert scrub_found(text, forms, found) == (streamed, bool(scanner.found))


@given(values, st.lists(st.integers(0, 4), max_size=60))
def test_no_match_is_shorter_than_its_disguises_floor_and_one_that_long_is_found(
    value: bytes, hows: list[int]
) -> None:
    """The floor skips a piece before its marker is looked for: a floor one too high would
    pass the shortest echo unscrubbed."""
    found = disguises(value, PH)
    for disguise in found:
        shortest = None
        for echo in _echoes(value, hows):
            for match in disguise.pattern.finditer(echo):
                text = match.group(0)
                if disguise.alphabet:  # base64: its padding may be left off
                    text = text[: match.start("pad") - match.start()]
                assert len(text) >= disguise.shortest
                assert disguise.found_in(text)
                shortest = len(text) if shortest is None else min(shortest, len(text))
        # The value itself (escaped) and its letters at each alignment (base64) are exactly
        # as long as the floor: each disguise has an echo above that matches at its floor.
        assert shortest == disguise.shortest


def _pieced(
    head: wire.Head, forms: dict[bytes, bytes], value: bytes
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """As the head was scrubbed before: the reason, each name and each value on its own."""
    found = disguises(value, PH)
    pieces = [head.reason]
    for key, val in head.headers:
        pieces += (key, val)
    one = [scrub_found(piece, forms, found)[0] for piece in pieces]
    return one[0], list(zip(one[1::2], one[2::2], strict=True))


@given(
    values,
    st.lists(st.integers(0, 4), max_size=60),
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=6),
    st.integers(0, 9),
)
def test_the_head_scrubbed_in_one_pass_is_each_piece_scrubbed(
    value: bytes, hows: list[int], headers: list[tuple[int, int]], reason: int
) -> None:
    choices = [b"plain", b"x-echo", b"", *_echoes(value, hows)]
    head = wire.Head(
        headers=[(b"x-" + choices[k % len(choices)], choices[v]) for k, v in headers],
        status=401,
        reason=b"bad " + choices[reason],
    )
    forms = {value: PH}
    assert scrub_head(head.reason, head.headers, forms, disguises(value, PH))[:2] == _pieced(
        head, forms, value
    )


def test_a_form_across_two_pieces_falls_back_to_each_piece() -> None:
    """A form holding an LF would match across a header's name and value in the joined head:
    the count of pieces changes, and each piece is scrubbed alone (none holds it)."""
    value = b"real-value-for-the-test"
    head = wire.Head(headers=[(b"x-a", b"tail" + value), (b"x-b", b"c")], status=200)
    forms = {value: PH, b"x-a\ntail": b"CROSSED"}
    assert scrub_head(head.reason, head.headers, forms, disguises(value, PH)) == (
        b"",
        [(b"x-a", b"tail" + PH), (b"x-b", b"c")],
        True,
    )


def test_a_placeholder_spelled_at_its_shortest_is_still_counted() -> None:
    """SecretRun.carries skips a text shorter than every spelling of the placeholder: the
    lower-cased placeholder is exactly as long, and is found; one byte less is not."""
    run = SecretRun((Spec("TOKEN", Rules.parse(("bound.test",)), ("bound.test",), "v" * 12),))
    (secret,) = run.secrets
    spelled = secret.placeholder.lower()
    assert run.carries(b"/?t=" + spelled, secret)
    assert run.carries(spelled, secret)
    assert not run.carries(spelled[:-1], secret)
    assert not run.carries(b"/small", secret)
