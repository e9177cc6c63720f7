"""The guardian and per-run cgroups for real, through this machine's v1 memory and cpu
hierarchies (ENVIRONMENT.md): SIGKILL an orchestrator whose run has a cgroup with a command
running in it; the command's processes -- one of them out of the command's process group, so
only the cgroup finds it -- and the run's cgroup directories must be gone within the grace.

On a v2 host (GitHub's runners) these v1 paths don't exist; the reaper's logic is covered by
tests/unit/test_guardian_cgroups.py there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from guardian_support import Orchestrator, guardian_done, spec, wait_for

from sprawl_orch.runs.cgroups import Delegation

GRACE = 3.0  # the guardian's default
LIMIT = 256 * 2**20
# `setsid` puts the second sleep in a process group of its own: killing the command's group
# (the guardian does that too) does not reach it; only its cgroup membership does.
COMMAND = ["sh", "-c", "setsid sleep 300 & sleep 300"]


@pytest.fixture(scope="module")
def v1(v1_delegation: Delegation) -> Delegation:
    return v1_delegation


def live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def procs(path: Path) -> set[int]:
    try:
        return {int(x) for x in (path / "cgroup.procs").read_text().split()}
    except OSError:
        return set()


@pytest.fixture
def session_dirs(v1: Delegation) -> Iterator[tuple[str, list[Path]]]:
    """The session's `sprawl-orch/<session>` per hierarchy; whatever the guardian missed is
    killed and removed afterwards (after the test asserted that it missed nothing)."""
    session = f"g{secrets.token_hex(4)}"
    dirs = [parent / "sprawl-orch" / session for parent in v1.parents.values()]
    yield session, dirs
    for session_dir in dirs:
        runs = [p for p in session_dir.glob("run-*") if p.is_dir()]
        for path in [*runs, session_dir]:
            for pid in procs(path):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            wait_for(lambda path=path: not procs(path), 5)  # type: ignore[misc]
            with contextlib.suppress(OSError):
                path.rmdir()


def test_sigkill_leaves_no_run_cgroup_and_no_process_in_it(
    v1: Delegation, session_dirs: tuple[str, list[Path]], tmp_path: Path
) -> None:
    session, dirs = session_dirs
    log = tmp_path / "guardian.log"
    orch = Orchestrator(
        {**spec(session, "copied_tree", tmp_path, [COMMAND], run="r"), "memory_limit": LIMIT}, log
    )
    orch.wait_line("exec 1")
    runs = [d / "run-r" for d in dirs]
    # sh, its sleep and the setsid'd sleep, in both hierarchies.
    assert wait_for(lambda: all(len(procs(r)) >= 3 for r in runs), 60), (
        orch.seen,
        [procs(r) for r in runs],
    )
    members = set().union(*(procs(r) for r in runs))
    killed = orch.sigkill()
    gone = wait_for(
        lambda: not any(map(live, members)) and not any(d.exists() for d in dirs), GRACE
    )
    after = time.monotonic() - killed
    still = [d for d in [*runs, *dirs] if d.exists()]
    assert gone, (
        f"{after:.2f} s after SIGKILL: live {[p for p in members if live(p)]}, dirs {still}"
    )
    done = guardian_done(log)
    assert done["left"] == [] and done["problems"] == [], done
    assert {str(r) for r in runs} <= set(done["cgroups"])
    assert {str(d) for d in dirs} <= set(done["cgroups"])
    print(
        f"run cgroups and {len(members)} processes gone {after:.2f} s after SIGKILL; "
        f"guardian: {done}"
    )
