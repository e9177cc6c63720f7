"""Attacks on the heads written in one pass (secrets/head.py: a request to a host with one
bound secret, an answer's head) and on the reader's shortcuts that came with them (wire.py:
the head's size bounded by the reads it came in, llhttp trusted to refuse CR, LF and NUL in a
field). Real proxy, raw TLS upstream on 127.0.0.1 (tests/secrets/raw.py)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from sprawl_orch.secrets.wire import HEAD_LIMIT
from tests.secrets.raw import raw_upstream
from tests.secrets.test_attacks import VALUE, Rig, _echo, _no_value, _reply
from tests.secrets.test_attacks_wire import _pieces


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with raw_upstream(_echo) as up:
        r = Rig(up, tmp_path, others=("OTHER",))
        try:
            yield r
        finally:
            r.proxy.close()


def test_a_pipelined_head_is_measured_from_its_own_start(rig: Rig) -> None:
    """Break (atkpass): the reader bounded a head by the whole read it began in, the
    request before it included. A second request whose head (50 KiB, under the limit) began
    in one TLS record after a 15 KiB first request, and came on in later records, was cut as
    "a message head over 65536 bytes" while still arriving."""
    pad_one = "a" * 15_500
    pad_two = "b" * 50_500
    first = f"GET /one HTTP/1.1\r\nHost: localhost:PORT\r\nX-Pad: {pad_one}\r\n\r\n"
    # One record (under 16 KiB): the first request whole and the second's request line.
    assert len(first) + 20 < 16 * 1024
    got = _pieces(
        rig,
        [
            first + "GET /two HTTP/1.1\r\n",
            f"Host: localhost:PORT\r\nAuthorization: Bearer PH\r\nX-Pad: {pad_two}\r\n",
            "Connection: close\r\n\r\n",
        ],
        pause=0.3,
    )
    assert len(pad_two) + 200 < HEAD_LIMIT < len(first) + len(pad_two)
    assert [h.split(b" ")[1] for h in rig.up.heads] == [b"/one", b"/two"], got[:200]
    assert f"Bearer {VALUE}".encode() in rig.up.heads[1]
    assert got.count(b"HTTP/1.1 200 ") == 2
    _no_value(got)


def test_a_head_past_the_limit_spread_over_records_is_still_cut(rig: Rig) -> None:
    """Held: the same second request, its head over the limit, is cut, never sent."""
    first = "GET /one HTTP/1.1\r\nHost: localhost:PORT\r\n\r\n"
    pad = "b" * (HEAD_LIMIT + 10)
    got = _pieces(
        rig,
        [
            first + "GET /two HTTP/1.1\r\n",
            f"Host: localhost:PORT\r\nX-Pad: {pad[:40_000]}",
            pad[40_000:] + "\r\nConnection: close\r\n\r\n",
        ],
        pause=0.3,
    )
    assert [h.split(b" ")[1] for h in rig.up.heads] == [b"/one"]
    assert got.count(b"HTTP/1.1 200 ") == 1


def _nul_reason(head: bytes, earlier: list[bytes]) -> bytes:
    return _reply(b"hi", status=b"200 O\x00K")


def test_a_reason_with_a_nul_is_refused_as_before(tmp_path: Path) -> None:
    """Break (atkpass): llhttp lets a NUL through in a reason phrase; the one-pass answer
    head turned it into `: ` (its name-value separator) and passed the answer on, where the
    parsed way refuses a reason holding CR, LF or NUL (wire.response_head)."""
    with raw_upstream(_nul_reason) as up:
        r = Rig(up, tmp_path)
        try:
            got = r.send("GET / HTTP/1.1\r\nHost: localhost:PORT\r\nConnection: close\r\n\r\n")
        finally:
            r.proxy.close()
    assert b"HTTP/1.1 200" not in got
    assert b"O: K" not in got


@pytest.mark.parametrize("scheme", ["Basic", "bAsIc", "BASIC"])
def test_basic_in_any_case_is_swapped_on_the_one_secret_path(rig: Rig, scheme: str) -> None:
    """Held: a `Basic` blob hiding the placeholder declines the one pass in any case of the
    scheme (swap_value decodes it), so the value reaches the bound host re-encoded."""
    blob = base64.b64encode(f"git:{rig.ph}".encode()).decode()
    got = rig.send(
        f"GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: {scheme} {blob}\r\n"
        "Connection: close\r\n\r\n"
    )
    sent = base64.b64encode(f"git:{VALUE}".encode())
    assert sent in rig.received() and rig.ph.encode() not in rig.received()
    _no_value(got)


def test_other_secrets_placeholder_in_a_header_is_counted_on_the_one_pass(rig: Rig) -> None:
    """Held: on the one-secret path, another secret's placeholder (in a value, in another
    case, in Proxy-Authorization which is sent on) goes out as it is and is counted."""
    other = rig.run.env()["OTHER"]
    got = rig.send(
        f"GET / HTTP/1.1\r\nHost: localhost:PORT\r\nX-A: {other}\r\n"
        f"Proxy-Authorization: Bearer {other.upper()}\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert f"Bearer {VALUE}".encode() in rig.received()
    assert other.encode() in rig.received()
    wheres = sorted(leak["where"] for leak in rig.run.report()["attempted_leaks"])
    assert wheres == ["header proxy-authorization", "header x-a"], wheres
    _no_value(got)


def test_a_placeholder_in_a_hop_by_hop_header_is_never_sent(rig: Rig) -> None:
    """Held: a header the one pass skips (Connection's, Keep-Alive, TE) is not sent, with the
    value or the placeholder, and a keep-alive HTTP/1.0 request is answered."""
    got = rig.send(
        "GET / HTTP/1.0\r\nHost: localhost:PORT\r\nConnection: keep-alive, X-Drop\r\n"
        "Keep-Alive: PH\r\nX-Drop: x\r\nTE: PH\r\n\r\n"
    )
    assert rig.ph.encode() not in rig.received() and VALUE.encode() not in rig.received()
    assert b"HTTP/1.1 200" in got
    _no_value(got)


@pytest.mark.parametrize("back", [0, 1, 2, 3, 4, 5, 30])
def test_a_head_ending_at_a_record_boundary_then_another_is_answered(rig: Rig, back: int) -> None:
    """Held: the first request's head cut `back` bytes before its end (inside its last
    CRLFCRLF, or right after it), the rest in the next record with a second request."""
    first = f"GET /one HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer {rig.ph}\r\n\r\n"
    second = "GET /two HTTP/1.1\r\nHost: localhost:PORT\r\nX-B: PH\r\nConnection: close\r\n\r\n"
    at = len(first) - back
    got = _pieces(rig, [first[:at], first[at:] + second], pause=0.2)
    assert [h.split(b" ")[1] for h in rig.up.heads] == [b"/one", b"/two"]
    assert all(VALUE.encode() in h for h in rig.up.heads)
    assert got.count(b"HTTP/1.1 200 ") == 2
    _no_value(got)


@pytest.mark.parametrize(
    "spelled",
    [
        lambda ph: quote(ph, safe="").replace("_", "%5F"),  # percent-encoded
        lambda ph: base64.b64encode(ph.encode()).decode(),  # base64, no Basic scheme
        lambda ph: "Token " + base64.b64encode(b"u:" + ph.encode()).decode(),
        lambda ph: ph.lower(),
    ],
    ids=["percent", "base64", "token-blob", "lower"],
)
def test_the_bound_placeholder_disguised_in_a_header_is_counted(
    rig: Rig, spelled: Callable[[str], str]
) -> None:
    """Break (atkpass): the bound secret's own placeholder spelled otherwise in a header to
    its host is never swapped (only its plain spelling and a Basic blob are) and went out
    uncounted, where the same spelling in the URL or the body is counted (docs/secrets.md:
    a placeholder sent where it is never swapped is counted as an attempted leak)."""
    hidden = spelled(rig.ph)
    got = rig.send(
        f"GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        f"X-A: {hidden}\r\nConnection: close\r\n\r\n"
    )
    assert hidden.encode() in rig.received()  # it went out as written
    assert f"Bearer {VALUE}".encode() in rig.received()
    leaks = rig.run.report()["attempted_leaks"]
    assert [(leak["secret"], leak["where"]) for leak in leaks] == [("GH_PAT", "header x-a")]
    _no_value(got)


def test_the_bound_placeholder_swapped_in_a_header_is_not_counted(rig: Rig) -> None:
    """Held, and the other side of the count above: the plain placeholder and a Basic blob
    holding it are swapped, so neither is counted."""
    blob = base64.b64encode(f"git:{rig.ph}".encode()).decode()
    rig.send(
        f"GET / HTTP/1.1\r\nHost: localhost:PORT\r\nX-A: Bearer PH\r\nAuthorization: Basic {blob}"
        "\r\nConnection: close\r\n\r\n"
    )
    assert rig.ph.encode() not in rig.received()
    assert rig.run.report()["attempted_leaks"] == []


def test_the_bound_placeholder_disguised_is_counted_on_the_parsed_way_too(rig: Rig) -> None:
    """The same count where the one pass declines (a Basic value sends the request the
    parsed way): the Basic blob swapped and not counted, the lower-cased placeholder counted,
    once, and the one in Accept-Encoding (never sent) not."""
    blob = base64.b64encode(f"git:{rig.ph}".encode()).decode()
    rig.send(
        f"GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Basic {blob}\r\n"
        f"X-A: {rig.ph.lower()}\r\nAccept-Encoding: {rig.ph.lower()}\r\nConnection: close\r\n\r\n"
    )
    assert base64.b64encode(f"git:{VALUE}".encode()) in rig.received()
    leaks = rig.run.report()["attempted_leaks"]
    assert [(leak["secret"], leak["where"]) for leak in leaks] == [("GH_PAT", "header x-a")]
