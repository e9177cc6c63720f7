"""The guardian's line protocol: what the orchestrator tells it, one message per line.

    expect NAME              a container of this name is about to be created
    created NAME ID          ... and now exists
    gone NAME                ... and was removed by the orchestrator itself
    pgroup PGID CREATE_TIME  a host command's process group (leader's psutil create_time)
    pgroup-gone PGID         ... ended and was cleaned up by the orchestrator
    scratch PATH             a scratch copy to delete if the orchestrator dies
    scratch-gone PATH        ... deleted by the orchestrator itself
    cgroup PATH              a run's cgroup directory (about to be made): empty and rmdir it
    cgroup-gone PATH         ... removed by the orchestrator itself

Fields are separated by one space and percent-encoded (`urllib.parse.quote`, nothing safe but
unreserved characters and "/"), so a path holding spaces, newlines or "%" survives the round
trip and no field can split a line. CREATE_TIME is written with `repr(float)`, which reads
back as the identical float: the guardian compares it for equality against psutil's value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from sprawl_orch.container.engine import ENGINES


class ProtocolError(ValueError):
    """A line that is not a message of this protocol."""


@dataclass(frozen=True)
class Expect:
    name: str


@dataclass(frozen=True)
class Created:
    name: str
    container_id: str


@dataclass(frozen=True)
class Gone:
    name: str


@dataclass(frozen=True)
class PGroup:
    pgid: int
    create_time: float


@dataclass(frozen=True)
class PGroupGone:
    pgid: int


@dataclass(frozen=True)
class Scratch:
    path: Path


@dataclass(frozen=True)
class ScratchGone:
    path: Path


@dataclass(frozen=True)
class Cgroup:
    path: Path


@dataclass(frozen=True)
class CgroupGone:
    path: Path


Message = (
    Expect | Created | Gone | PGroup | PGroupGone | Scratch | ScratchGone | Cgroup | CgroupGone
)
_PATH_VERBS: dict[str, type[Scratch | ScratchGone | Cgroup | CgroupGone]] = {
    "scratch": Scratch, "scratch-gone": ScratchGone, "cgroup": Cgroup, "cgroup-gone": CgroupGone,
}


def _enc(text: str) -> str:
    if not text:
        raise ProtocolError("an empty field cannot be sent")
    return quote(text, safe="/")


def _dec(field: str) -> str:
    if not field:
        raise ProtocolError("empty field")
    # errors="strict": a field that is not UTF-8 once decoded is not ours.
    try:
        return unquote(field, errors="strict")
    except UnicodeDecodeError as err:
        raise ProtocolError(f"field {field!r} is not percent-encoded UTF-8") from err


def _pgid(field: str) -> int:
    if not field.isascii() or not field.isdigit() or int(field) <= 1:
        raise ProtocolError(f"process group {field!r} is not a pid above 1")
    return int(field)


def _time(field: str) -> float:
    try:
        value = float(field)
    except ValueError as err:
        raise ProtocolError(f"create time {field!r} is not a number") from err
    if not math.isfinite(value) or value < 0:
        raise ProtocolError(f"create time {field!r} is not a finite time")
    return value


def format_message(message: Message) -> str:
    """One line, newline included."""
    match message:
        case Expect(name):
            fields = ["expect", _enc(name)]
        case Created(name, container_id):
            fields = ["created", _enc(name), _enc(container_id)]
        case Gone(name):
            fields = ["gone", _enc(name)]
        case PGroup(pgid, create_time):
            if pgid <= 1 or not math.isfinite(create_time) or create_time < 0:
                raise ProtocolError(f"pgroup {pgid} {create_time!r} cannot be sent")
            fields = ["pgroup", str(pgid), repr(float(create_time))]
        case PGroupGone(pgid):
            if pgid <= 1:
                raise ProtocolError(f"pgroup-gone {pgid} cannot be sent")
            fields = ["pgroup-gone", str(pgid)]
        case Scratch(path) | ScratchGone(path) | Cgroup(path) | CgroupGone(path):
            verb = next(v for v, kind in _PATH_VERBS.items() if isinstance(message, kind))
            if not path.is_absolute():
                raise ProtocolError(f"{verb} path {str(path)!r} is not absolute")
            fields = [verb, _enc(str(path))]
    return " ".join(fields) + "\n"


def parse_message(line: str) -> Message:
    """Read one line (with or without its newline); ProtocolError if it is not a message."""
    fields = line.rstrip("\n").split(" ")
    verb, args = fields[0], fields[1:]
    arity = {
        "expect": 1, "created": 2, "gone": 1, "pgroup": 2, "pgroup-gone": 1,
        "scratch": 1, "scratch-gone": 1, "cgroup": 1, "cgroup-gone": 1,
    }
    if verb not in arity:
        raise ProtocolError(f"unknown message {verb!r}")
    if len(args) != arity[verb]:
        raise ProtocolError(f"{verb} takes {arity[verb]} field(s), got {len(args)}")
    if verb == "expect":
        return Expect(_dec(args[0]))
    if verb == "created":
        return Created(_dec(args[0]), _dec(args[1]))
    if verb == "gone":
        return Gone(_dec(args[0]))
    if verb == "pgroup":
        return PGroup(_pgid(args[0]), _time(args[1]))
    if verb == "pgroup-gone":
        return PGroupGone(_pgid(args[0]))
    path = Path(_dec(args[0]))
    if not path.is_absolute():
        raise ProtocolError(f"{verb} path {str(path)!r} is not absolute")
    return _PATH_VERBS[verb](path)


# -- the shared guardian's greeting (guardian/server.py) ---------------------------------
# A caller's connection opens with `hello SESSION ENGINES GRACE` (ENGINES comma-separated
# or "-", GRACE a number or "-" for the default); the guardian answers `ok` once it owns
# the connection, and `done 0|1` after cleaning up behind it (1: something was left).


@dataclass(frozen=True)
class Hello:
    session: str
    engines: tuple[str, ...]
    grace: float | None


def format_hello(hello: Hello) -> str:
    for engine in hello.engines:
        if engine not in ENGINES:
            raise ProtocolError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    engines = ",".join(hello.engines) or "-"
    grace = "-" if hello.grace is None else repr(float(hello.grace))
    return f"hello {_enc(hello.session)} {engines} {grace}\n"


def parse_hello(line: str) -> Hello:
    fields = line.rstrip("\n").split(" ")
    if len(fields) != 4 or fields[0] != "hello":
        raise ProtocolError(f"a connection must open with hello, not {line[:80]!r}")
    engines = () if fields[2] == "-" else tuple(fields[2].split(","))
    if any(e not in ENGINES for e in engines):
        raise ProtocolError(f"unknown engine in {fields[2]!r}")
    grace = None if fields[3] == "-" else _time(fields[3])
    return Hello(_dec(fields[1]), engines, grace)
