"""What is swapped where (secrets/swap.py), without a network: headers only, Basic credentials
inside their base64, configured headers set outright; a needle split across chunks is found."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.secrets.swap import Bound, Scanner, holds, swap_headers

PH = b"SPRAWL_PLACEHOLDER_T_" + b"a" * 32
VAL = b"real-value-123"
SECRET = Bound(name="T", placeholder=PH, value=VAL)


def test_headers_are_swapped_and_echo_forms_kept() -> None:
    basic = b"Basic " + base64.b64encode(b"u:" + PH)
    echoes: dict[bytes, bytes] = {}
    out, used = swap_headers(
        [(b"Authorization", b"Bearer " + PH), (b"X-Other", basic), (b"X-None", b"plain")],
        [SECRET],
        echoes,
    )
    assert used == {"T"}
    assert out[0] == (b"authorization", b"Bearer " + VAL)
    assert base64.b64decode(out[1][1].split()[1]) == b"u:" + VAL
    assert out[2] == (b"x-none", b"plain")
    assert echoes[b"Bearer " + VAL] == b"Bearer " + PH
    assert echoes[out[1][1].split()[1]] == basic.split()[1]


def test_configured_headers_replace_what_the_command_sent() -> None:
    header = Bound("T", PH, VAL, header=b"x-api-key", format="key={value}")
    out, used = swap_headers([(b"X-Api-Key", b"forged")], [header], {})
    assert out == [(b"x-api-key", b"key=" + VAL)] and used == {"T"}
    basic = Bound("T", PH, VAL, basic_user=b"git")
    out, _ = swap_headers([(b"Authorization", b"Bearer forged")], [basic], {})
    assert out == [(b"authorization", b"Basic " + base64.b64encode(b"git:" + VAL))]


def test_an_unbound_secret_is_not_swapped() -> None:
    out, used = swap_headers([(b"Authorization", PH)], [], {})
    assert out == [(b"authorization", PH)] and used == set()
    assert holds(b"Basic " + base64.b64encode(b"x:" + PH), PH)
    assert not holds(b"Basic !!notbase64", PH)


@given(st.binary(max_size=200), st.binary(max_size=200), st.lists(st.integers(1, 50), max_size=8))
def test_a_needle_cut_anywhere_is_found_and_replaced(
    before: bytes, after: bytes, cuts: list[int]
) -> None:
    data = before + VAL + after
    scanner = Scanner({VAL: PH})
    out = b""
    at = 0
    for cut in cuts:
        out += scanner.feed(data[at : at + cut])
        at += cut
    out += scanner.feed(data[at:]) + scanner.end()
    assert VAL in scanner.found
    assert VAL not in out
    assert out == (before + VAL + after).replace(VAL, PH) or VAL in before + after


def test_no_repr_holds_a_value() -> None:
    """A repr lands in logs, tracebacks and `{err!r}` reasons: none may carry the value."""
    from sprawl_orch.egress.rules import Rules
    from sprawl_orch.secrets.run import SecretRun
    from sprawl_orch.secrets.spec import Spec

    run = SecretRun((Spec("A", Rules.parse(("a.example.org",)), ("a.example.org",), "VALUE123"),))
    assert "VALUE123" not in repr(run) + repr(run.secrets) + repr(run.specs) + repr(SECRET)
    assert VAL.decode() not in repr(SECRET)
