"""One run's cgroup(s): join a starting command, read the OOM count, list, empty and remove.

Made by `cgroups.Cgroups.create`; see that module for the layout. A `Joining` travels in the
`Launch` to host-process arms: `process.HostProcess` holds the child at a gate, calls
`join(pid)`, and only then lets it exec the command, so the command and everything it starts
are in the run's cgroup from their first instruction. An arm that ignores the joining (the
container arm: its processes are the engine's) leaves it unjoined, which is the truth.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sprawl_orch.runs.cgroup_counters import read_counter

if TYPE_CHECKING:
    from sprawl_orch.runs.shares import Shares

EMPTY_TIMEOUT_S = 5.0


def _append_pid(path: Path, pid: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{pid}\n".encode())
    finally:
        os.close(fd)


def _read_pids(path: Path) -> set[int]:
    try:
        return {int(x) for x in path.read_text().split()}
    except (OSError, ValueError):
        # the cgroup is gone (or mid-removal): it holds no pids
        return set()


@dataclass
class RunGroup:
    run: str
    version: Literal["v1", "v2"]
    dirs: dict[str, Path]  # v2: {"unified": dir}; v1: {"cpu": dir, "memory": dir?}
    held: Shares
    # Each dir as /proc/<pid>/cgroup names it, to check a listed pid is still ours.
    relative: dict[str, str] = field(default_factory=dict)

    def procs_files(self) -> tuple[Path, ...]:
        return tuple(d / "cgroup.procs" for d in self.dirs.values())

    def oom_count(self) -> int | None:
        """v2 `memory.events` `oom`; v1 `memory.oom_control` `oom_kill`. None: unreadable."""
        if self.version == "v2":
            path, key = self.dirs["unified"] / "memory.events", "oom"
        elif "memory" in self.dirs:
            path, key = self.dirs["memory"] / "memory.oom_control", "oom_kill"
        else:
            return None
        return read_counter(path, key)

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files():
            found |= _read_pids(procs)
        return found

    def joining(self) -> Joining:
        return Joining(self)

    def _still_ours(self, pid: int) -> bool:
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            # the pid exited: it is not ours to signal
            return False
        wanted = set(self.relative.values())
        return any(line.split(":", 2)[-1] in wanted for line in text.splitlines())

    def kill_all(self) -> None:
        """SIGKILL every process in the run's cgroup(s). Each pid is pinned with a pidfd and
        re-checked to be in our cgroup before the signal, so a pid reused since the listing
        is never hit."""
        unified = self.dirs.get("unified")
        if unified is not None and (unified / "cgroup.kill").exists():
            # cgroup.kill absent or refused: the per-pid kill below does the work
            with contextlib.suppress(OSError):
                (unified / "cgroup.kill").write_text("1")  # v2, Linux >= 5.14: atomic
        for pid in self.pids():
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                # exited since listed: nothing to kill
                continue
            try:
                if self._still_ours(pid):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                # exited between the check and the signal: nothing to kill
                pass
            finally:
                os.close(pidfd)

    def empty_and_remove(self, rmdir: Callable[[Path], None]) -> str | None:
        """Kill until empty (a fork can race the listing), then rmdir. None or what stayed."""
        deadline = time.monotonic() + EMPTY_TIMEOUT_S
        while True:
            self.kill_all()
            stayed: list[str] = []
            for path in self.dirs.values():
                try:
                    rmdir(path)
                except FileNotFoundError:
                    # removed already (the guardian or a racing release): what we wanted
                    pass
                except OSError as err:
                    stayed.append(f"{path}: {err.strerror or err}")
            if not stayed:
                return None
            if time.monotonic() > deadline:
                return "; ".join(stayed)
            # EBUSY while the killed processes are being torn down (or reaped by their parent).
            time.sleep(0.02)


class Joining:
    """One command's entry into its run's cgroup, done by the arm that starts it."""

    def __init__(self, group: RunGroup) -> None:
        self.group = group
        self.joined: bool | None = None  # None: the arm never tried (not a host process)
        self.error = ""
        self.before: int | None = None  # the OOM count right after joining, before exec

    def join(self, pid: int) -> None:
        """Write `pid` into every cgroup of the run. Never raises: a failure leaves the command
        running outside the ceiling, and says why (seed D29: never fail a build for a share)."""
        try:
            for procs in self.group.procs_files():
                _append_pid(procs, pid)
        except OSError as err:
            self.joined = False
            gone = " (the process had already exited)" if err.errno == errno.ESRCH else ""
            self.error = f"{err.filename or ''}: {err.strerror or err}{gone}"
            return
        self.joined = True
        self.before = self.group.oom_count()
