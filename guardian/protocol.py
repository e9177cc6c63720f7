"""The guardian's messages: ONE table (`TABLE`) that parsing, formatting, the client's
announcements (orchestrator/runs/launch.py: Watcher) and the watch list (guardian/watchlist.py)
are all driven from or checked against (tests/unit/test_guardian_table.py). design.md §4
shows the table; `table_markdown()` writes it.

A message is one line: its verb, then its fields, each separated by one space. The fields'
spelling follows their type (`Name`, `Pgid`, `CreateTime`, `AbsPath`, ...): text and paths
are percent-encoded (`urllib.parse.quote`, nothing safe but unreserved characters and "/"),
so a path holding spaces, newlines or "%" survives the round trip and no field can split a
line. A create time is written with `repr(float)`, which reads back as the identical float:
the guardian compares it for equality against psutil's value.

A connection (or pipe) carries, in order: one `hello` (only on the shared guardian's
socket, guardian/server.py), then announcements until EOF; the guardian answers `ok` once it
owns the connection and `done` after cleaning up behind it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar, get_args, get_type_hints
from urllib.parse import quote, unquote

from sprawl_orch.engines.engine import ENGINES

T = TypeVar("T")


class ProtocolError(ValueError):
    """A line that is not a message of this protocol, or a message that cannot be sent."""


# -- how a field is spelled -------------------------------------------------------------------
@dataclass(frozen=True)
class Spelling(Generic[T]):
    what: str  # for people: the table in design.md §4
    write: Callable[[T], str]
    read: Callable[[str], T]


def _text_out(text: str) -> str:
    if not text:
        raise ProtocolError("an empty field cannot be sent")
    return quote(text, safe="/")


def _text_in(field: str) -> str:
    if not field:
        raise ProtocolError("empty field")
    # errors="strict": a field that is not UTF-8 once decoded is not ours.
    try:
        return unquote(field, errors="strict")
    except UnicodeDecodeError as err:
        raise ProtocolError(f"field {field!r} is not percent-encoded UTF-8") from err


def _pgid_out(pgid: int) -> str:
    if pgid <= 1:
        raise ProtocolError(f"process group {pgid} is not a pid above 1")
    return str(pgid)


def _pgid_in(field: str) -> int:
    if not field.isascii() or not field.isdigit() or int(field) <= 1:
        raise ProtocolError(f"process group {field!r} is not a pid above 1")
    return int(field)


def _time_out(value: float) -> str:
    if not math.isfinite(value) or value < 0:
        raise ProtocolError(f"time {value!r} is not a finite time")
    return repr(float(value))


def _time_in(field: str) -> float:
    try:
        value = float(field)
    except ValueError as err:
        raise ProtocolError(f"time {field!r} is not a number") from err
    if not math.isfinite(value) or value < 0:
        raise ProtocolError(f"time {field!r} is not a finite time")
    return value


def _absolute(path: Path) -> Path:
    if not path.is_absolute():
        raise ProtocolError(f"path {str(path)!r} is not absolute")
    return path


# Seconds the guardian watches for late creates after EOF when the caller names none.
DEFAULT_GRACE = 3.0


def _engines_out(engines: tuple[str, ...]) -> str:
    for engine in engines:
        if engine not in ENGINES:
            raise ProtocolError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    return ",".join(engines) or "-"


def _engines_in(field: str) -> tuple[str, ...]:
    engines = () if field == "-" else tuple(field.split(","))
    if any(e not in ENGINES for e in engines):
        raise ProtocolError(f"unknown engine in {field!r}; known: {', '.join(ENGINES)}")
    return engines


def _flag_in(field: str) -> bool:
    if field not in ("0", "1"):
        raise ProtocolError(f"{field!r} is not 0 or 1")
    return field == "1"


TEXT = Spelling[str]("text (percent-encoded, not empty)", _text_out, _text_in)
PGID = Spelling[int]("a pid above 1", _pgid_out, _pgid_in)
TIME = Spelling[float]("seconds (`repr(float)`, finite, not negative)", _time_out, _time_in)
PATH = Spelling[Path](
    "absolute path (percent-encoded)",
    lambda p: _text_out(str(_absolute(p))),
    lambda f: _absolute(Path(_text_in(f))),
)
ENGINE_LIST = Spelling[tuple[str, ...]](
    f"`{','.join(ENGINES)}`, one of them, or `-` (none)",
    _engines_out,
    _engines_in,
)
GRACE = Spelling[float | None](
    f"seconds, or `-` (the default, {DEFAULT_GRACE:g} s)",
    lambda g: "-" if g is None else _time_out(g),
    lambda f: None if f == "-" else _time_in(f),
)
FLAG = Spelling[bool]("`0` or `1`", lambda b: "1" if b else "0", _flag_in)

Name = Annotated[str, TEXT]
Pgid = Annotated[int, PGID]
CreateTime = Annotated[float, TIME]
AbsPath = Annotated[Path, PATH]
Engines = Annotated[tuple[str, ...], ENGINE_LIST]
Grace = Annotated[float | None, GRACE]
Flag = Annotated[bool, FLAG]


# -- the messages (the docstring is the meaning the table shows) -------------------------------
@dataclass(frozen=True)
class Hello:
    """Opens a connection to the shared guardian: whose lifeline it is, which engines to sweep
    and how long to watch for late creates."""

    session: Name
    engines: Engines
    grace: Grace


@dataclass(frozen=True)
class Ok:
    """The guardian owns the connection: from now on the caller's death is cleaned up behind."""


@dataclass(frozen=True)
class Done:
    """The guardian cleaned up behind the connection; `1`: something was left."""

    left: Flag


@dataclass(frozen=True)
class Expect:
    """A container of this name is about to be created (a create may land after we die)."""

    name: Name


@dataclass(frozen=True)
class Created:
    """... and now exists, with this id."""

    name: Name
    container_id: Name


@dataclass(frozen=True)
class Gone:
    """... and was removed by the orchestrator itself."""

    name: Name


@dataclass(frozen=True)
class PGroup:
    """A host command's process group; the leader's psutil create_time guards against pid
    reuse."""

    pgid: Pgid
    create_time: CreateTime


@dataclass(frozen=True)
class PGroupGone:
    """... ended and was cleaned up by the orchestrator."""

    pgid: Pgid


@dataclass(frozen=True)
class Scratch:
    """A scratch copy (or admission's probe directory) to delete if the orchestrator dies."""

    path: AbsPath


@dataclass(frozen=True)
class ScratchGone:
    """... deleted by the orchestrator itself."""

    path: AbsPath


@dataclass(frozen=True)
class Cgroup:
    """A run's (or session's) cgroup directory, before it is made: emptied and removed."""

    path: AbsPath


@dataclass(frozen=True)
class CgroupGone:
    """... removed by the orchestrator itself."""

    path: AbsPath


Announcement = (
    Expect | Created | Gone | PGroup | PGroupGone | Scratch | ScratchGone | Cgroup | CgroupGone
)
Reply = Ok | Done
AnyMessage = Hello | Announcement | Reply


class Phase(enum.Enum):
    GREETING = "caller, first line"  # caller -> guardian, once
    ANNOUNCEMENT = "caller"  # caller -> guardian, until EOF
    REPLY = "guardian"  # guardian -> caller


@dataclass(frozen=True)
class Entry:
    verb: str
    kind: type[AnyMessage]
    phase: Phase
    # The announcement's method on orchestrator/runs/launch.py's Watcher (its fields, in order,
    # are the method's parameters).
    call: str | None = None

    @property
    def fields(self) -> tuple[tuple[str, Spelling[Any]], ...]:
        hints = get_type_hints(self.kind, include_extras=True)
        return tuple((f.name, get_args(hints[f.name])[1]) for f in dataclasses.fields(self.kind))

    @property
    def meaning(self) -> str:
        return " ".join((self.kind.__doc__ or "").split())


TABLE: tuple[Entry, ...] = (
    Entry("hello", Hello, Phase.GREETING),
    Entry("expect", Expect, Phase.ANNOUNCEMENT, "expect"),
    Entry("created", Created, Phase.ANNOUNCEMENT, "created"),
    Entry("gone", Gone, Phase.ANNOUNCEMENT, "gone"),
    Entry("pgroup", PGroup, Phase.ANNOUNCEMENT, "process_group"),
    Entry("pgroup-gone", PGroupGone, Phase.ANNOUNCEMENT, "process_group_gone"),
    Entry("scratch", Scratch, Phase.ANNOUNCEMENT, "scratch"),
    Entry("scratch-gone", ScratchGone, Phase.ANNOUNCEMENT, "scratch_gone"),
    Entry("cgroup", Cgroup, Phase.ANNOUNCEMENT, "cgroup"),
    Entry("cgroup-gone", CgroupGone, Phase.ANNOUNCEMENT, "cgroup_gone"),
    Entry("ok", Ok, Phase.REPLY),
    Entry("done", Done, Phase.REPLY),
)
_BY_KIND = {entry.kind: entry for entry in TABLE}
_BY_VERB = {entry.verb: entry for entry in TABLE}
_FIELDS = {entry.verb: entry.fields for entry in TABLE}  # resolved once, at import


def format_line(message: AnyMessage) -> str:
    """One line, newline included; ProtocolError if a field cannot be sent."""
    entry = _BY_KIND[type(message)]
    try:
        words = [spelling.write(getattr(message, name)) for name, spelling in _FIELDS[entry.verb]]
    except ProtocolError as err:
        raise ProtocolError(f"{entry.verb}: {err}") from None
    return " ".join([entry.verb, *words]) + "\n"


def parse_line(line: str, phase: Phase) -> AnyMessage:
    """Read one line (with or without its newline) that must be a message of `phase`."""
    verb, *words = line.rstrip("\n").split(" ")
    entry = _BY_VERB.get(verb)
    if entry is None or entry.phase is not phase:
        known = ", ".join(e.verb for e in TABLE if e.phase is phase)
        raise ProtocolError(f"unknown message {verb[:40]!r} here (expected: {known})")
    fields = _FIELDS[verb]
    if len(words) != len(fields):
        raise ProtocolError(f"{verb} takes {len(fields)} field(s), got {len(words)}")
    try:
        values = [spelling.read(word) for (_, spelling), word in zip(fields, words, strict=True)]
    except ProtocolError as err:
        raise ProtocolError(f"{verb}: {err}") from None
    return entry.kind(*values)


def format_message(message: Announcement) -> str:
    return format_line(message)


def parse_message(line: str) -> Announcement:
    """An announcement; ProtocolError for anything else (a second hello included)."""
    message = parse_line(line, Phase.ANNOUNCEMENT)
    assert isinstance(message, Announcement)  # the table's phase: only announcements
    return message


def format_hello(hello: Hello) -> str:
    return format_line(hello)


def parse_hello(line: str) -> Hello:
    try:
        message = parse_line(line, Phase.GREETING)
    except ProtocolError as err:
        raise ProtocolError(
            f"a connection must open with hello ({err}), not {line[:80]!r}"
        ) from None
    assert isinstance(message, Hello)
    return message


def parse_reply(line: str) -> Reply:
    message = parse_line(line, Phase.REPLY)
    assert isinstance(message, Reply)
    return message


def table_markdown() -> str:
    """The table as design.md §4 shows it (a test keeps the two equal)."""
    rows = ["| line | fields | sent by | meaning |", "|---|---|---|---|"]
    for entry in TABLE:
        line = " ".join([entry.verb, *(name.upper() for name, _ in entry.fields)])
        fields = "; ".join(f"{name.upper()}: {s.what}" for name, s in entry.fields) or "—"
        sender = entry.phase.value + (f" (`Watcher.{entry.call}`)" if entry.call else "")
        rows.append(f"| `{line}` | {fields} | {sender} | {entry.meaning} |")
    return "\n".join(rows) + "\n"
