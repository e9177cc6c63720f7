"""The guardian's share of per-run cgroups (orchestrator/runs/cgroups.py): at EOF, empty every
announced cgroup directory and remove it, deepest first.

- Only directories shaped like ours are touched: a run's (`run-...`, v1 and v2) or a session's
  (`.../sprawl-orch/<session>`, v1). A wrong announcement must not be able to remove anyone
  else's cgroup -- nor anything at all outside cgroupfs: removal is `rmdir`, never a recursive
  delete (cgroupfs control files are not real files; `rmdir` of a cgroup takes them along, and
  `rmdir` of an ordinary directory holding files fails).
- A process listed in `cgroup.procs` is pinned with a pidfd, then the file is read again: still
  listed means the pidfd is that process, in that cgroup now, so a pid reused between the first
  read and the signal is never hit. SIGKILL, then read again until empty (a fork can race the
  listing), bounded by EMPTY_SECONDS.
- `rmdir` of a v1 cgroup answers EBUSY until its last task has left (a killed task leaves on
  exit), so it is retried within the same bound.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection
from pathlib import Path

EMPTY_SECONDS = 5.0
POLL_SECONDS = 0.02
RUN_PREFIX = "run-"
SESSIONS_DIR = "sprawl-orch"

Log = Callable[..., None]


def is_ours(path: Path) -> bool:
    """A run's cgroup, or a session's directory below `sprawl-orch`."""
    return path.is_absolute() and (
        path.name.startswith(RUN_PREFIX) or path.parent.name == SESSIONS_DIR
    )


def _pids(procs: Path) -> set[int]:
    try:
        return {int(x) for x in procs.read_text().split()}
    except (OSError, ValueError):
        # the cgroup is gone (or mid-removal): it holds no pids
        return set()


def kill_members(path: Path) -> int:
    """SIGKILL every process listed in `path/cgroup.procs` now; how many were signalled."""
    procs = path / "cgroup.procs"
    killed = 0
    for pid in _pids(procs):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue  # already gone
        try:
            if pid in _pids(procs):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                killed += 1
        except OSError:
            # exited since listed: nothing to kill
            pass
        finally:
            os.close(pidfd)
    return killed


def empty_and_remove(
    path: Path, deadline: float, rmdir: Callable[[Path], None] = os.rmdir
) -> tuple[int, str | None]:
    """Kill until empty, then rmdir; (processes signalled, None or why it stayed)."""
    killed = 0
    while True:
        killed += kill_members(path)
        try:
            rmdir(path)
            return killed, None
        except FileNotFoundError:
            # removed already (the orchestrator's own release won the race): what we wanted
            return killed, None
        except OSError as err:
            if time.monotonic() >= deadline:
                return killed, f"{path}: {err.strerror or err}"
        time.sleep(POLL_SECONDS)


def remove_cgroups(
    paths: Collection[Path], log: Log, rmdir: Callable[[Path], None] = os.rmdir
) -> tuple[list[str], list[str], list[str]]:
    """Deepest first, so a session's directory goes after its runs'.
    (removed, still there, problems)"""
    removed: list[str] = []
    left: list[str] = []
    problems: list[str] = []
    deadline = time.monotonic() + EMPTY_SECONDS
    for path in sorted(paths, key=lambda p: (-len(p.parts), str(p))):
        if not is_ours(path):
            problems.append(f"{path}: not a run's or session's cgroup, left alone")
            continue
        killed, stayed = empty_and_remove(path, deadline, rmdir)
        if killed:
            log("cgroup-killed", path=str(path), processes=killed)
        if stayed is None:
            removed.append(str(path))
        else:
            left.append(str(path))
            problems.append(stayed)
    with contextlib.suppress(Exception):
        log("cgroups-removed", removed=removed, left=left, problems=problems)
    return removed, left, problems
