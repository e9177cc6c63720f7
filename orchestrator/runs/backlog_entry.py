"""What the backlog (backlog.py) holds of one command: the values fixed at its start
(Pending), its table entry (Entry), a run as `processes()` reports it (RunProcesses), and the
Started part of its result, made from an entry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sprawl_orch.changes.changes import Changes
from sprawl_orch.copy.sync import FileWork
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.environment import env_names
from sprawl_orch.runs.ceiling import (
    CeilingMark,
    NotAsked,
    Watching,
    ceiling_at,
)
from sprawl_orch.runs.launch import Launch, Running
from sprawl_orch.runs.results import (
    Confinement,
    ExecResult,
    Started,
    backgrounded,
)
from sprawl_orch.runs.shares import Shares


class RunProcesses(BaseModel):
    """One run as `processes()` reports it."""

    model_config = ConfigDict(frozen=True)
    pids: list[int]
    unfollowed: int  # live commands whose descendants can't all be listed (not in a cgroup)
    share: Shares  # what the run actually holds, not what was asked
    affinity: int | Literal["os"]


@dataclass(frozen=True)
class Pending:
    """What a command's result needs besides its Finished record, fixed at start."""

    arm: ArmName
    command: list[str]
    interpreter: str | None
    confinement: Confinement
    work: FileWork | None
    window: float
    started: float  # time.monotonic()


@dataclass
class Entry:
    handle: str
    run: str
    running: Running
    launch: Launch
    pending: Pending
    mark: CeilingMark
    followed: bool
    # Called once when the entry is collected: gives its copy back to the exec tool.
    release_copy: Callable[[], None] | None = None
    # Called once when the command has ended, before the copy goes back: its `changes`.
    changes: Callable[[str], Changes] | None = None
    # Set when the output is followed live (stream.Follower): called once the streams are
    # complete; the result then keeps no way back (the person already has every byte).
    drain: Callable[[], None] | None = None
    # Called once the command has finished, first: the streams' pipes read to their end
    # (output_pipe.py), before anything reads the output files.
    streams_done: Callable[[], None] | None = None
    background: bool = False
    claimed: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    result: ExecResult | None = None


def background_result(entry: Entry) -> ExecResult:
    known = entry.mark if not isinstance(entry.mark, Watching) else NotAsked()
    return backgrounded(
        started_of(entry),
        entry.handle,
        entry.pending.window,
        ceiling_at(known, None).as_result(),
    )


def started_of(entry: Entry) -> Started:
    p = entry.pending
    return Started(
        arm=p.arm.value,
        where="host" if p.arm is ArmName.HOST else "sandbox",
        command=p.command,
        shell=entry.launch.shell_line is not None,
        env=env_names(entry.launch.env),
        interpreter=p.interpreter,
        confinement=p.confinement,
        work=p.work,
        run=entry.run,
        duration_ms=round((time.monotonic() - p.started) * 1000, 1),
    )
