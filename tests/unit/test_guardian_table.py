"""The guardian's messages are ONE table (guardian/protocol.py: TABLE): these fail when a message
is added there and not to the Watcher's methods, the watch list, the union types or
docs/design.md §4 -- or the other way round."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest

from sprawl_orch.guardian import protocol
from sprawl_orch.guardian.protocol import (
    TABLE,
    Announcement,
    AnyMessage,
    Done,
    Entry,
    Hello,
    Ok,
    Phase,
    ProtocolError,
    Reply,
    format_line,
    parse_line,
)
from sprawl_orch.guardian.watchlist import Watchlist
from sprawl_orch.runs.guardian_client import Guardian
from sprawl_orch.runs.launch import NullWatcher, Watcher

ROOT = Path(__file__).resolve().parents[2]
SAMPLE: dict[int, object] = {
    id(protocol.TEXT): "a b%/c",
    id(protocol.PGID): 4242,
    id(protocol.TIME): 1795996266.53,
    id(protocol.PATH): Path("/tmp/a b/sprawl-x"),
    id(protocol.ENGINE_LIST): ("docker", "podman"),
    id(protocol.GRACE): 0.5,
    id(protocol.FLAG): True,
}


def sample(entry: Entry) -> AnyMessage:
    return entry.kind(*(SAMPLE[id(spelling)] for _, spelling in entry.fields))


def announcements() -> list[Entry]:
    return [e for e in TABLE if e.phase is Phase.ANNOUNCEMENT]


class Recorder(Watcher):
    def __init__(self) -> None:
        self.told: list[Announcement] = []

    def tell(self, message: Announcement) -> None:
        self.told.append(message)


def test_verbs_and_kinds_appear_once_and_the_unions_are_the_table() -> None:
    assert len({e.verb for e in TABLE}) == len(TABLE)
    assert len({e.kind for e in TABLE}) == len(TABLE)
    assert set(get_args(Announcement)) == {e.kind for e in announcements()}
    assert set(get_args(Reply)) == {e.kind for e in TABLE if e.phase is Phase.REPLY}
    assert set(get_args(AnyMessage)) == {e.kind for e in TABLE}
    # Only announcements are Watcher calls; every field has a spelling.
    assert all((e.call is not None) == (e.phase is Phase.ANNOUNCEMENT) for e in TABLE)
    for entry in TABLE:
        assert [n for n, _ in entry.fields] == [f.name for f in dataclasses.fields(entry.kind)]
        assert entry.meaning, f"{entry.verb} has no meaning (the class docstring)"


def test_the_watcher_has_one_method_per_announcement_and_nothing_else() -> None:
    public = {
        name
        for name, _ in inspect.getmembers(Watcher, inspect.isfunction)
        if not name.startswith("_") and name != "tell"
    }
    assert public == {e.call for e in announcements()}


@pytest.mark.parametrize("entry", announcements(), ids=lambda e: e.verb)
def test_each_watcher_method_tells_exactly_its_message(entry: Entry) -> None:
    assert entry.call is not None
    method = getattr(Watcher, entry.call)
    hints = get_type_hints(method)
    hints.pop("return")
    assert hints == get_type_hints(entry.kind), "parameters and fields differ"
    message = sample(entry)
    ear = Recorder()
    getattr(ear, entry.call)(*(getattr(message, n) for n, _ in entry.fields))
    assert ear.told == [message]


@pytest.mark.parametrize("watcher", [Guardian, NullWatcher])
def test_the_client_and_the_null_watcher_implement_tell_alone(watcher: type[Any]) -> None:
    assert issubclass(watcher, Watcher)
    for entry in announcements():
        assert getattr(watcher, str(entry.call)) is getattr(Watcher, str(entry.call))


def test_every_announcement_moves_the_watch_list() -> None:
    # In the table's order each announcement is followed by the one that takes it back, so
    # with the same sample fields each must change what the watch list holds.
    watch = Watchlist()
    for entry in announcements():
        before = dataclasses.replace(
            watch,
            containers=dict(watch.containers),
            pgroups=dict(watch.pgroups),
            scratch=set(watch.scratch),
            cgroups=set(watch.cgroups),
        )
        message = sample(entry)
        assert isinstance(message, Announcement)
        watch.apply(message)
        assert watch != before, f"{entry.verb} did not change the watch list"
    assert watch.empty()


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: e.verb)
def test_each_message_reads_back_in_its_phase_only(entry: Entry) -> None:
    message = sample(entry)
    line = format_line(message)
    assert line.startswith(entry.verb) and line.endswith("\n") and line.count("\n") == 1
    assert parse_line(line, entry.phase) == message
    for other in Phase:
        if other is not entry.phase:
            with pytest.raises(ProtocolError):
                parse_line(line, other)


def test_the_connection_lines_are_spelled_as_before() -> None:
    assert format_line(Hello("s 1", ("docker", "podman"), 0.5)) == "hello s%201 docker,podman 0.5\n"
    assert format_line(Hello("s", (), None)) == "hello s - -\n"
    assert format_line(Ok()) == "ok\n"
    assert format_line(Done(False)) == "done 0\n"
    assert format_line(Done(True)) == "done 1\n"
    for bad in ("done 2", "done", "ok 1", "expect x"):
        with pytest.raises(ProtocolError):
            protocol.parse_reply(bad)


def test_design_md_shows_the_table_as_it_is() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    assert protocol.table_markdown() in design, (
        "docs/design.md §4 differs from guardian/protocol.py's table: paste "
        "`python -c 'from sprawl_orch.guardian.protocol import table_markdown as t; print(t())'`"
    )
