"""The guardian's line protocol and what it builds from the lines (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.guardian.protocol import (
    Announcement,
    Cgroup,
    CgroupGone,
    Created,
    Expect,
    Gone,
    PGroup,
    PGroupGone,
    ProtocolError,
    Scratch,
    ScratchGone,
    format_message,
    parse_message,
)
from sprawl_orch.guardian.watchlist import Watchlist

texts = st.text(min_size=1)
paths = st.lists(st.text(min_size=1).filter(lambda t: "/" not in t), min_size=1, max_size=4).map(
    lambda parts: Path("/", *parts)
)
messages: st.SearchStrategy[Announcement] = st.one_of(
    st.builds(Expect, texts),
    st.builds(Created, texts, texts),
    st.builds(Gone, texts),
    st.builds(PGroup, st.integers(2, 2**22), st.floats(0, 4e9, allow_nan=False)),
    st.builds(PGroupGone, st.integers(2, 2**22)),
    st.builds(Scratch, paths),
    st.builds(ScratchGone, paths),
    st.builds(Cgroup, paths),
    st.builds(CgroupGone, paths),
)


@given(messages)
def test_every_message_is_one_line_and_reads_back_equal(message: Announcement) -> None:
    line = format_message(message)
    assert line.endswith("\n") and line.count("\n") == 1
    assert parse_message(line) == message


@given(st.floats(0, 4e9, allow_nan=False))
def test_create_time_reads_back_as_the_identical_float(value: float) -> None:
    parsed = parse_message(format_message(PGroup(1234, value)))
    assert isinstance(parsed, PGroup) and parsed.create_time == value


def test_the_spelling_on_the_wire() -> None:
    assert format_message(Expect("sprawl-ab12-1")) == "expect sprawl-ab12-1\n"
    assert format_message(Created("sprawl-ab12-1", "f00d")) == "created sprawl-ab12-1 f00d\n"
    assert format_message(Gone("sprawl-ab12-1")) == "gone sprawl-ab12-1\n"
    assert format_message(PGroup(4242, 1795996266.53)) == "pgroup 4242 1795996266.53\n"
    assert format_message(PGroupGone(4242)) == "pgroup-gone 4242\n"
    assert format_message(Scratch(Path("/tmp/a b/sprawl-x"))) == "scratch /tmp/a%20b/sprawl-x\n"
    assert format_message(ScratchGone(Path("/t/%\n"))) == "scratch-gone /t/%25%0A\n"
    assert format_message(Cgroup(Path("/sys/fs/cgroup/cpu/sprawl-orch/s/run-a b"))) == (
        "cgroup /sys/fs/cgroup/cpu/sprawl-orch/s/run-a%20b\n"
    )
    assert format_message(CgroupGone(Path("/c/run-x"))) == "cgroup-gone /c/run-x\n"


def test_a_name_with_a_newline_cannot_split_the_line() -> None:
    line = format_message(Expect("a\nexpect b"))
    assert line.count("\n") == 1
    assert parse_message(line) == Expect("a\nexpect b")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "hello x",
        "expect",
        "expect a b",
        "created a",
        "pgroup 12",
        "pgroup x 1.0",
        "pgroup 1 1.0",  # pid 1 is never a command's group
        "pgroup 0 1.0",
        "pgroup -5 1.0",
        "pgroup 12 nan",
        "pgroup 12 inf",
        "pgroup 12 -1",
        "pgroup-gone ١٢",  # non-ASCII digits
        "scratch relative/path",
        "scratch ",
        "cgroup run-a",  # relative
        "cgroup",
        "cgroup-gone /a /b",
        "expect  x",
        "expect %ff",  # not UTF-8 once decoded
    ],
)
def test_lines_that_are_not_messages_are_refused(line: str) -> None:
    with pytest.raises(ProtocolError):
        parse_message(line)


@pytest.mark.parametrize(
    "message",
    [
        Expect(""),
        PGroup(1, 1.0),
        PGroup(7, float("nan")),
        PGroupGone(0),
        Scratch(Path("relative")),
        Cgroup(Path("run-x")),
        CgroupGone(Path("run-x")),
    ],
)
def test_messages_that_cannot_be_sent_are_refused(message: Announcement) -> None:
    with pytest.raises(ProtocolError):
        format_message(message)


def test_the_watchlist_keeps_what_was_announced_and_not_taken_back() -> None:
    watch = Watchlist()
    for message in [
        Expect("a"),
        Created("a", "id-a"),
        Expect("b"),
        Expect("c"),
        Gone("c"),
        PGroup(100, 5.0),
        PGroup(200, 6.0),
        PGroupGone(100),
        Scratch(Path("/s/sprawl-1")),
        Scratch(Path("/s/sprawl-2")),
        ScratchGone(Path("/s/sprawl-2")),
        Cgroup(Path("/c/sprawl-orch/s")),
        Cgroup(Path("/c/sprawl-orch/s/run-a")),
        Cgroup(Path("/c/sprawl-orch/s/run-b")),
        CgroupGone(Path("/c/sprawl-orch/s/run-b")),
    ]:
        watch.apply(message)
    assert watch.containers == {"a": "id-a", "b": None}
    assert watch.in_flight() == {"b"}
    assert watch.pgroups == {200: 6.0}
    assert watch.scratch == {Path("/s/sprawl-1")}
    assert watch.cgroups == {Path("/c/sprawl-orch/s"), Path("/c/sprawl-orch/s/run-a")}
    assert not watch.empty()


def test_taking_back_what_was_never_announced_is_harmless() -> None:
    watch = Watchlist()
    for message in [
        Gone("x"),
        PGroupGone(55),
        ScratchGone(Path("/nope")),
        CgroupGone(Path("/c/run-x")),
    ]:
        watch.apply(message)
    assert watch.empty()


def test_a_second_expect_does_not_forget_the_id() -> None:
    watch = Watchlist()
    watch.apply(Expect("a"))
    watch.apply(Created("a", "id"))
    watch.apply(Expect("a"))
    assert watch.containers == {"a": "id"}
    assert watch.in_flight() == set()


def test_hello_round_trips_and_refuses_what_it_cannot_carry() -> None:
    from sprawl_orch.guardian.protocol import Hello, format_hello, parse_hello

    for hello in (Hello("s 1%", ("docker", "podman"), 0.5), Hello("s", (), None)):
        line = format_hello(hello)
        assert line.endswith("\n") and line.count("\n") == 1
        assert parse_hello(line) == hello
    with pytest.raises(ProtocolError):
        format_hello(Hello("s", ("lxc",), None))
    for bad in ("hello s docker", "expect x", "hello s lxc -", "hello s docker nan"):
        with pytest.raises(ProtocolError):
            parse_hello(bad)
