"""What the orchestrator has told the guardian and not yet taken back (pure, no I/O).

Every announcement of the table (guardian/protocol.py) has its case here; mypy's
`assert_never` fails the type check when one is added there and not here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

from sprawl_orch.guardian.protocol import (
    Announcement,
    Cgroup,
    CgroupGone,
    Created,
    Expect,
    Gone,
    PGroup,
    PGroupGone,
    Scratch,
    ScratchGone,
)


@dataclass
class Watchlist:
    # name -> container id (None while the create has not been confirmed)
    containers: dict[str, str | None] = field(default_factory=dict)
    pgroups: dict[int, float] = field(default_factory=dict)
    scratch: set[Path] = field(default_factory=set)
    cgroups: set[Path] = field(default_factory=set)

    def apply(self, message: Announcement) -> None:
        match message:
            case Expect(name):
                self.containers.setdefault(name, None)
            case Created(name, container_id):
                self.containers[name] = container_id
            case Gone(name):
                self.containers.pop(name, None)
            case PGroup(pgid, create_time):
                self.pgroups[pgid] = create_time
            case PGroupGone(pgid):
                self.pgroups.pop(pgid, None)
            case Scratch(path):
                self.scratch.add(path)
            case ScratchGone(path):
                self.scratch.discard(path)
            case Cgroup(path):
                self.cgroups.add(path)
            case CgroupGone(path):
                self.cgroups.discard(path)
            case _:
                assert_never(message)

    def in_flight(self) -> set[str]:
        """Names announced with `expect` and never confirmed: a create may still land."""
        return {name for name, cid in self.containers.items() if cid is None}

    def empty(self) -> bool:
        return not (self.containers or self.pgroups or self.scratch or self.cgroups)
