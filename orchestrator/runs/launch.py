"""The small interface every arm implements (the httpx BaseTransport shape).

An arm is asked to `start` a `Launch` and hands back a `Running`; the exec tool
waits on it for the window, kills it or hands it to the backlog, and reads the
`Finished` record. Arms never build results: `results.py` owns every key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.assurances import Assurances
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.egress.plan import EgressPlan
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

if TYPE_CHECKING:
    from sprawl_orch.core.command_input import CommandInput


class Watcher(ABC):
    """The guardian's ear (guardian/): told of everything that must not outlive us. One method
    per announcement of the guardian's table (guardian/protocol.py: TABLE, each entry's
    `call`; the meanings are there), each only the message handed to `tell`: a watcher
    implements `tell` alone (tests/unit/test_guardian_table.py keeps these and the table
    equal). Calls never raise; a watcher that can't be reached degrades to doing nothing."""

    @abstractmethod
    def tell(self, message: Announcement) -> None: ...

    def expect(self, name: str) -> None:
        self.tell(Expect(name))

    def created(self, name: str, container_id: str) -> None:
        self.tell(Created(name, container_id))

    def gone(self, name: str) -> None:
        self.tell(Gone(name))

    def process_group(self, pgid: int, create_time: float) -> None:
        self.tell(PGroup(pgid, create_time))

    def process_group_gone(self, pgid: int) -> None:
        self.tell(PGroupGone(pgid))

    def scratch(self, path: Path) -> None:
        self.tell(Scratch(Path(path)))

    def scratch_gone(self, path: Path) -> None:
        self.tell(ScratchGone(Path(path)))

    def cgroup(self, path: Path) -> None:
        self.tell(Cgroup(Path(path)))

    def cgroup_gone(self, path: Path) -> None:
        self.tell(CgroupGone(Path(path)))


class NullWatcher(Watcher):
    def tell(self, message: Announcement) -> None:
        return None


class Join(Protocol):
    """A run's cgroup to enter (cgroup_run.Joining). A host-process arm calls `join(pid)`
    after the child exists and before it execs the command; other arms ignore it."""

    def join(self, pid: int) -> None: ...


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    outputs: Path
    tag: str
    session: str
    run: str = "default"
    # The shell line as written, when the shell arm expanded it into argv.
    shell_line: str | None = None
    watcher: Watcher = field(default_factory=NullWatcher)
    # The run's cgroup, when the run has one (backlog.py); None: nothing to join.
    join: Join | None = None
    # The person's working directory: arms with a mount namespace mount the copy (cwd) at
    # this path (design §5), so absolute paths recorded in the tree resolve into the copy.
    # None: the same as cwd (where = host, or a caller that has no copy).
    workdir: Path | None = None
    # `[sandbox.network] allow` (egress/plan.py): the arm makes the proxy's listener inside
    # the command's network namespace before the program runs, or refuses.
    egress: EgressPlan | None = None
    # -i/-t (command_input.py): what the command reads; None: /dev/null, as always before.
    given: CommandInput | None = None


@dataclass(frozen=True)
class Finished:
    exit_code: int | None
    stdout_path: Path
    stderr_path: Path
    killed: bool = False
    oom_killed: bool = False
    # The kernel refused a fork at the command's pids limit (where it counts that).
    pids_hit: bool = False
    # Limits an arm's runtime enforced by itself (the python arm: "fuel", "memory", "time").
    limits_hit: tuple[str, ...] = ()
    extra: Mapping[str, object] = field(default_factory=dict)
    # The program could not be executed at all (found out only once it was started, e.g.
    # in a container): the result is this refusal, not an exit code (unrunnable.py).
    refusal: SprawlError | None = None


class Running(Protocol):
    def wait(self, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds (None: forever); True once the command ended."""
        ...

    def kill(self) -> None:
        """End the whole command: every process it started, or its container."""
        ...

    def pids(self) -> list[int]:
        """Host pids of the command's processes (empty when not visible from here)."""
        ...

    def finish(self) -> Finished:
        """Collect the outcome and release what the command held. Call after wait()."""
        ...


class Arm(Protocol):
    name: ArmName

    def assurances(self) -> Assurances: ...

    def note(self) -> str | None:
        """A sentence added to the statement (e.g. why the user axis is not kept)."""
        ...

    def prepare(self, workdir: Path) -> None:
        """Probes that must pass before any copy is made; raise SprawlError to refuse."""
        ...

    def start(self, launch: Launch) -> Running: ...

    def close(self) -> None:
        """Release per-tool resources (engine clients, ...). Never raises."""
        ...
