"""Where a run's memory ceiling landed for one command (design §11, seed D95).

A command is *marked* when it enters the backlog's table, and *judged* when it is collected
(settled within its window, harvested, halted or released) from the run's OOM count read at
that moment. `ceiling_at` is the seed's Lean `ceilingAt`, case for case:

    ceilingAt : CeilingMark → Option Nat → CeilingReport
    | .notAsked, _                 => .silent
    | .unapplied, _                => .unapplied
    | .unread, _                   => .unread
    | .watching _, none            => .unread
    | .watching before, some after => if before < after then .hit else .silent

and its two theorems are property tests (tests/unit/test_ceiling.py). The ceiling belongs to
the run, not to one process: when the count moved while a command ran, that command reports
`hit`, whichever process of the run was refused.

The result key `memory_ceiling` is built here and nowhere else:
`{"state": "hit" | "unapplied" | "unread", "limit_bytes": N, "detail": "…"}`, plus `"why"` for
`unapplied`. A silent ceiling (none asked, or held and not hit) is no key at all (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal


class Why(StrEnum):
    """Why an asked-for ceiling did not hold the command (the seed's `Unapplied`)."""

    PLATFORM = "platform"  # this platform has no per-run memory ceiling
    NOT_DELEGATED = "not_delegated"  # Linux: our cgroup is not writable
    REFUSED = "refused"  # the cgroup would not take the run or its limit
    UNJOINED = "unjoined"  # the command is not in the run's cgroup (container, pid write failed)


@dataclass(frozen=True)
class NotAsked:
    """No ceiling was asked for this run."""


@dataclass(frozen=True)
class Unapplied:
    limit: int
    why: Why
    reason: str = ""  # the platform's own words (errno text), for the detail


@dataclass(frozen=True)
class Unread:
    """The ceiling holds, but its count could not be read when the command entered."""

    limit: int
    reason: str = ""


@dataclass(frozen=True)
class Watching:
    """The ceiling holds; `before` is the run's OOM count when the command entered."""

    limit: int
    before: int


CeilingMark = NotAsked | Unapplied | Unread | Watching

State = Literal["silent", "hit", "unapplied", "unread"]


@dataclass(frozen=True)
class CeilingReport:
    """The seed's `CeilingReport`, with the limit and reason kept for the result key."""

    state: State
    limit: int | None = None
    why: Why | None = None
    reason: str = ""

    def as_result(self) -> dict[str, Any] | None:
        """The `memory_ceiling` result key; None when there is nothing to say."""
        if self.state == "silent" or self.limit is None:
            return None
        key: dict[str, Any] = {
            "state": self.state,
            "limit_bytes": self.limit,
            "detail": _detail(self),
        }
        if self.state == "unapplied":
            assert self.why is not None
            key["why"] = self.why.value
        return key


def ceiling_at(mark: CeilingMark, read: int | None) -> CeilingReport:
    """The verdict at collection from the mark and the count read now (None: unreadable)."""
    match mark:
        case NotAsked():
            return CeilingReport("silent")
        case Unapplied(limit, why, reason):
            return CeilingReport("unapplied", limit, why, reason)
        case Unread(limit, reason):
            return CeilingReport("unread", limit, reason=reason)
        case Watching(limit, before):
            if read is None:
                return CeilingReport("unread", limit, reason="the count could not be read now")
            if before < read:
                return CeilingReport(
                    "hit", limit, reason=f"the run's OOM count went {before} -> {read}"
                )
            return CeilingReport("silent", limit)
    raise TypeError(f"not a CeilingMark: {mark!r}")


_WHY_PHRASE: dict[Why, str] = {
    Why.PLATFORM: "this platform has no per-run memory ceiling",
    Why.NOT_DELEGATED: "the orchestrator's cgroup is not delegated (not writable), so runs get "
    "no cgroup of their own",
    Why.REFUSED: "the cgroup refused the run or its limit",
    Why.UNJOINED: "the command did not run inside the run's cgroup",
}


def _detail(report: CeilingReport) -> str:
    mib = f"{report.limit} bytes ({(report.limit or 0) / 2**20:.1f} MiB)"
    said = f": {report.reason}" if report.reason else ""
    if report.state == "hit":
        return (
            f"the run hit its memory ceiling of {mib} while this command ran{said}; an "
            "allocation was refused and the kernel killed a process of the run"
        )
    if report.state == "unread":
        return f"the memory ceiling of {mib} is set, but whether it was hit could not be read{said}"
    assert report.why is not None
    return (
        f"the memory ceiling of {mib} did not apply to this command: "
        f"{_WHY_PHRASE[report.why]}{said}"
    )
