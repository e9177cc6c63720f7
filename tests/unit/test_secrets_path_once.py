"""This round's shortcuts on the intercepted request's path (benchmarks/secrets_proxy.py), each
against the plain way it replaced: swap_headers calls swap_value only for a value that holds a
placeholder or starts `basic ` (it called it on every header), scrub_found skips the
disguises when none of their markers is in a text (it tried each disguise), check_plain skips a text
shorter than every spelling of every placeholder (it asked carries() of each secret), the
response parser's head read without an isinstance per message, and the request's counting
run after it went upstream (still counted when it is cut or never sent)."""

from __future__ import annotations

import base64
from collections.abc import Iterable

from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets import wire
from sprawl_orch.secrets.disguise import Marked, disguises
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from sprawl_orch.secrets.swap import Bound, scrub_found, swap_headers, swap_value

VALUE = b"real-value-for-the-test"


def _plain_swap(
    headers: Iterable[tuple[bytes, bytes]], bound: Iterable[Bound], echoes: dict[bytes, bytes]
) -> tuple[list[tuple[bytes, bytes]], set[str]]:
    """swap_headers as it was: swap_value on every header, for every secret."""
    out = [(k.lower(), v) for k, v in headers]
    used: set[str] = set()
    for secret in bound:
        swapped = []
        for key, value in out:
            new = swap_value(value, secret)
            if new != value:
                used.add(secret.name)
                echoes[new] = value
                old_blob, new_blob = value.partition(b" ")[2], new.partition(b" ")[2]
                if old_blob and new_blob and len(new_blob) >= 8:
                    echoes[new_blob] = old_blob
            swapped.append((key, new))
        out = swapped
        if secret.header is not None:
            text = secret.format.format(value=secret.value.decode()).encode()
            out = [(k, v) for k, v in out if k != secret.header] + [(secret.header, text)]
            used.add(secret.name)
        if secret.basic_user is not None:
            blob = base64.b64encode(secret.basic_user + b":" + secret.value)
            out = [(k, v) for k, v in out if k != b"authorization"]
            out.append((b"authorization", b"Basic " + blob))
            used.add(secret.name)
    return out, used


SECRETS = (
    Bound("A", b"SPRAWL_PLACEHOLDER_A_" + b"a" * 32, VALUE),
    Bound("B", b"SPRAWL_PLACEHOLDER_B_" + b"b" * 32, b"other", header=b"x-b", format="T {value}"),
    Bound("C", b"SPRAWL_PLACEHOLDER_C_" + b"c" * 32, b"third", basic_user=b"git"),
)


def _value(kind: int, secret: int, text: bytes) -> bytes:
    """A header value the swap may or may not touch: plain text, a placeholder in it, a Basic
    blob with or without one, the scheme in other cases and spacings."""
    ph = SECRETS[secret % len(SECRETS)].placeholder
    blob = base64.b64encode(b"user:" + (ph if kind % 2 else text))
    schemes = [b"Basic ", b"basic ", b"BASIC ", b"Basic  ", b"Basic", b"Bearer ", b"basicx "]
    scheme = schemes[kind % 7]
    return [
        text,
        text + ph + text,
        scheme + blob,
        scheme + text,
        b"Bearer " + ph,
        scheme + blob + b"!",  # not valid base64
        scheme,
    ][kind % 7]


@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"authorization", b"X-Api", b"host", b"x-b", b"cookie"]),
            st.integers(0, 48),
            st.integers(0, 2),
            st.binary(max_size=12),
        ),
        max_size=6,
    ),
    st.lists(st.integers(0, 2), max_size=3, unique=True),
)
def test_swap_headers_is_swap_value_on_every_header(
    rows: list[tuple[bytes, int, int, bytes]], which: list[int]
) -> None:
    headers = [(name, _value(kind, secret, text)) for name, kind, secret, text in rows]
    bound = [SECRETS[i] for i in which]
    fast: dict[bytes, bytes] = {}
    plain: dict[bytes, bytes] = {}
    assert swap_headers(headers, bound, fast) == _plain_swap(headers, bound, plain)
    assert fast == plain


def _run() -> SecretRun:
    rules = Rules.parse(("bound.test",))
    return SecretRun(
        (Spec("TOKEN", rules, ("bound.test",), "v" * 12), Spec("OTHER", rules, (), "w" * 12))
    )


def _spelled(run: SecretRun, how: int, cut: int) -> bytes:
    """A placeholder as a command could spell it, cut short or not: plain, lower-cased,
    percent-encoded, in base64 (inside Basic or not)."""
    ph = run.secrets[how % 2].placeholder
    forms = [
        ph,
        ph.lower(),
        b"".join(b"%%%02X" % c for c in ph),
        base64.b64encode(b"u:" + ph),
        b"Basic " + base64.b64encode(b"u:" + ph),
    ]
    form = forms[how % len(forms)]
    return form[: max(len(form) - cut, 0)]


@given(st.integers(0, 9), st.integers(0, 80), st.binary(max_size=8), st.binary(max_size=8))
def test_check_plain_is_carries_for_every_secret(
    how: int, cut: int, before: bytes, after: bytes
) -> None:
    run = _run()  # placeholders are drawn per run: the text is made from this one's
    data = before + _spelled(run, how, cut) + after
    expected = [s.name for s in run.secrets if run.carries(data, s)]
    run.check_plain("bound.test:443", "url", data, ())
    assert [leak["secret"] for leak in run.report()["attempted_leaks"]] == expected
    if len(data) < run._floor:
        assert expected == []  # the floor skips only what no secret's carries() finds


STATUS = [b"200 OK", b"101 Switching", b"204 No Content", b"304 Not Modified", b"100 Continue"]


@given(
    st.sampled_from(STATUS),
    st.sampled_from([b"", b"content-length: 3\r\n", b"transfer-encoding: chunked\r\n"]),
    st.booleans(),
    st.sampled_from([b"GET", b"CONNECT", b"HEAD"]),
)
def test_a_head_is_read_as_before(status: bytes, framing: bytes, head: bool, method: bytes) -> None:
    """_head asks the parser's kind from Reader.response, not isinstance: a response's status
    and a request's method come out as before, 101 and CONNECT refused, and the events of a
    response to HEAD or without a body end as before (one shared End)."""
    body = b"3\r\nabc\r\n0\r\n\r\n" if b"chunked" in framing else b"abc" if framing else b""
    code = int(status[:3])
    response = wire.Reader(response=True)
    response.no_body = head
    # A body only where one is read (a 204's, 304's or HEAD answer's would be a next message).
    answer = body if code == 200 and not head else b""
    response.feed(b"HTTP/1.1 " + status + b"\r\nx: y\r\n" + framing + b"\r\n" + answer)
    events = list(response.events)
    if code == 101:
        assert [type(e) for e in events] == [wire.Bad]
    else:
        first = events[0]
        assert isinstance(first, wire.Head) and first.status == code and first.method == b""
        # Every answer here ends but a 200 framed by the connection's close.
        whole = head or code != 200 or bool(framing)
        assert [type(e) for e in events[1:]] == (
            [wire.Body, wire.End] if whole and answer else [wire.End] if whole else []
        )
    request = wire.Reader(response=False)
    request.feed(method + b" / HTTP/1.1\r\nhost: a\r\n" + framing + b"\r\n" + body)
    got = list(request.events)
    if method == b"CONNECT":
        assert [type(e) for e in got] == [wire.Bad]
    else:
        first = got[0]
        assert isinstance(first, wire.Head) and first.method == method and first.status == 0
        assert isinstance(got[-1], wire.End)


LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/+=-_.~:@!$*"
PH = b"SPRAWL_PLACEHOLDER_T_" + b"a" * 32


@given(
    st.text(LETTERS, min_size=3, max_size=40).map(str.encode),
    st.lists(st.integers(0, 5), max_size=4),
    st.binary(max_size=24),
)
def test_marked_disguises_scrub_as_the_plain_loop(
    value: bytes, hows: list[int], around: bytes
) -> None:
    """scrub_found skips the disguises' loop when Marked.none_in says no marker is there: the
    same text and the same `found` as the loop over the plain list (a value too short for a
    marker, whose pattern runs everywhere, included)."""
    ways = disguises(value, PH)
    echoes = [
        value,
        value.upper(),
        value.replace(b"-", b"%2D").replace(b"/", b"\\/"),
        base64.b64encode(b"u:" + value),
        base64.urlsafe_b64encode(b"us:" + value),
        value[: len(value) // 2],
    ]
    text = around + b"".join(echoes[h] + around for h in hows)
    forms = {b"Bearer " + value: b"Bearer " + PH}
    assert scrub_found(text, forms, Marked(ways)) == scrub_found(text, forms, list(ways))
