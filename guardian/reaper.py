"""What the guardian does at EOF: remove everything the dead orchestrator left, fast.

All of it at once, in threads: per engine, force-remove the announced containers, then list
the session's label and remove what the list adds; kill the announced process groups; delete
the scratch copies; empty and remove the announced cgroups (guardian/_cgroup_reap.py). Then,
while a create announced with `expect` has not been seen (it may still be in flight at the
engine), or while a removal has not yet shown up as gone, poll every engine until the grace
period ends -- longer while the create's CLI process still runs -- and remove whatever appears.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.removal import delete_path
from sprawl_orch.engines.sweep import Found
from sprawl_orch.guardian._cgroup_reap import remove_cgroups
from sprawl_orch.guardian._engines import ReaperEngine
from sprawl_orch.guardian.watchlist import Watchlist

POLL_SECONDS = 0.05
# While the CLI process of an announced create still runs, the create is still in flight (a
# loaded engine can take longer than the grace period): keep waiting, up to this much longer.
CREATOR_EXTRA_SECONDS = 30.0
TERM_SECONDS = 0.5
# psutil's create_time is starttime/CLK_TCK + btime, and the kernel recomputes btime from the
# wall clock on every read of /proc/stat: a clock step can move it. One tick of slack keeps
# an equal process equal; a reused pid started at another moment still differs.
CREATE_TIME_SLACK = 0.011
# Only directories named like a ScratchCopy are deleted: a wrong announcement must not be able
# to delete the person's tree.
SCRATCH_PREFIX = "sprawl-"

Log = Callable[..., None]


@dataclass
class Report:
    announced: list[str] = field(default_factory=list)  # names force-removed as announced
    removed: dict[str, list[str]] = field(default_factory=dict)  # engine -> names listed+removed
    late: list[str] = field(default_factory=list)  # names that appeared after EOF
    pgroups: list[int] = field(default_factory=list)  # groups signalled
    scratch: list[str] = field(default_factory=list)  # copies deleted
    cgroups: list[str] = field(default_factory=list)  # cgroup directories removed
    problems: list[str] = field(default_factory=list)
    # still there when the grace ended: container names, cgroup directories
    left: list[str] = field(default_factory=list)
    seconds: float = 0.0


def group_is_ours(pgid: int, create_time: float) -> bool:
    """The announced group, not another that got the number after a pid reuse: while any
    member lives (or the leader is an unreaped zombie) the kernel keeps the number from being
    handed out again, so a live leader must have the announced creation time. A group whose
    leader is gone is taken as ours: for it to be another, our whole group would have had to
    end, the number be recycled to a new group leader, and that leader end too."""
    try:
        return abs(psutil.Process(pgid).create_time() - create_time) <= CREATE_TIME_SLACK
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) members of the group: a zombie leader nobody reaps (the orchestrator
    that would have reaped it is dead) cannot be killed and holds nothing."""
    members = []
    for proc in psutil.process_iter(["status"]):
        # the process ended while listed (or is not ours to read): not a member
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
    return members


def creators(names: Collection[str]) -> list[int]:
    """Pids of live `... create ... --name NAME ...` processes for one of `names`: the
    engine CLI (or a wrapper around it) the dead orchestrator started and never heard back
    from."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "create" not in argv:
            continue
        named = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--name"}
        named |= {a.removeprefix("--name=") for a in argv if a.startswith("--name=")}
        if named & set(names):
            found.append(proc.pid)
    return found


def kill_groups(groups: dict[int, float], log: Log) -> list[int]:
    """SIGTERM every verified group, wait up to TERM_SECONDS, SIGKILL what is left."""
    ours = [pgid for pgid, created in groups.items() if group_is_ours(pgid, created)]
    for pgid in set(groups) - set(ours):
        log("pgroup-skipped", pgid=pgid, why="pid reused: the leader's create_time differs")
    for pgid in ours:
        # the group ended already, or its pid is another user's now: nothing of ours to signal
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_SECONDS
    live = [p for p in ours if group_members(p)]
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [p for p in live if group_members(p)]
    for pgid in live:
        # the group ended already, or its pid is another user's now: nothing of ours to signal
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return ours


def delete_scratch(path: Path) -> str | None:
    """Delete one scratch copy without following any link in it (core.removal.delete_path:
    directory fds + O_NOFOLLOW, or lstat-checked paths where there are no dir fds);
    None on success or if it is already gone."""
    if not path.name.startswith(SCRATCH_PREFIX):
        return f"{path}: not a scratch copy name ({SCRATCH_PREFIX}...), left alone"
    try:
        delete_path(path)
    except OSError as err:
        return f"{path}: {err}"
    return None


class Reaper:
    def __init__(
        self,
        session: str,
        engines: list[ReaperEngine],
        grace: float,
        log: Log,
        *,
        rmdir: Callable[[Path], None] = os.rmdir,
    ) -> None:
        self.session = session
        self.engines = engines
        self.grace = grace
        self.log = log
        self._rmdir = rmdir  # tests stand a plain directory tree in for cgroupfs

    def _find(self, engine: ReaperEngine, names: Collection[str], report: Report) -> list[Found]:
        try:
            return engine.find(self.session, names)
        except SprawlError as err:
            report.problems.append(f"{err.subject}: {err.detail}")
            return []

    def _remove(self, engine: ReaperEngine, found: list[Found], report: Report) -> None:
        if not found:
            return
        errors = engine.remove([f.container_id for f in found])
        report.problems.extend(errors)
        report.removed.setdefault(engine.name, []).extend(f.name for f in found)
        self.log("removed", engine=engine.name, names=[f.name for f in found], errors=errors)

    def _first_sweep(self, engine: ReaperEngine, watch: Watchlist, report: Report) -> list[Found]:
        """Remove the announced containers, then list the label and remove what the list adds.
        One after the other, not side by side: a `podman ps` beside the `podman rm` slowed the
        removal by ~140 ms (podman 4.3.1: CPU and container locks, measured), and containers
        that were never announced are the rare case. Returns what the list showed."""
        refs = [cid or name for name, cid in watch.containers.items()]
        report.announced = sorted(watch.containers)
        if refs:
            errors = engine.remove(refs)
            report.problems.extend(errors)
            self.log("removed-announced", engine=engine.name, refs=refs, errors=errors)
        found = self._find(engine, watch.containers, report)
        self._remove(engine, found, report)
        # From here on, what appears for the session is `late`: said so a reader of the log
        # (and the late-create tests) can tell the two apart.
        self.log("swept", engine=engine.name, found=[f.name for f in found])
        return found

    def reap(self, watch: Watchlist) -> Report:
        started = time.monotonic()
        report = Report()
        waiting = watch.in_flight()
        with ThreadPoolExecutor(max_workers=len(self.engines) + 3) as pool:
            groups = pool.submit(kill_groups, dict(watch.pgroups), self.log)
            copies = pool.submit(self._delete_copies, set(watch.scratch))
            cgroups = pool.submit(remove_cgroups, set(watch.cgroups), self.log, self._rmdir)
            sweeps = [pool.submit(self._first_sweep, e, watch, report) for e in self.engines]
            for sweep in sweeps:
                waiting -= {f.name for f in sweep.result()}
            self._watch_late(watch, waiting, started, report, pool)
            report.pgroups = groups.result()
            report.scratch, problems = copies.result()
            report.problems.extend(problems)
            report.cgroups, left, problems = cgroups.result()
            report.left.extend(left)
            report.problems.extend(problems)
        report.seconds = round(time.monotonic() - started, 3)
        return report

    def _watch_late(
        self,
        watch: Watchlist,
        waiting: set[str],
        started: float,
        report: Report,
        pool: ThreadPoolExecutor,
    ) -> None:
        """Poll until every awaited name has shown up (and been removed) and a list comes
        back empty, or the grace period ends."""
        if not self.engines:
            return
        deadline = started + self.grace
        cap = deadline + CREATOR_EXTRA_SECONDS
        names = set(watch.containers)
        said = False
        while True:
            seen = self._round(names, report, pool)
            late = seen & waiting
            report.late.extend(sorted(late))
            waiting -= late
            if not (waiting or seen):
                return
            now = time.monotonic()
            if now >= deadline:
                live = creators(waiting) if waiting and now < cap else []
                if not live:
                    break
                if not said:
                    self.log("create-in-flight", pids=live, names=sorted(waiting))
                    said = True
                deadline = min(now + POLL_SECONDS * 4, cap)
            time.sleep(POLL_SECONDS)
        # A creator may have finished between the last list and the look for creators.
        seen = self._round(names, report, pool)
        report.late.extend(sorted(seen & waiting))
        waiting -= seen
        if waiting:
            self.log("never-created", names=sorted(waiting))
        if seen:
            # The last round removed what it saw; say what a fresh look still finds.
            report.left = sorted(self._round(names, report, pool, remove=False))

    def _round(
        self, names: set[str], report: Report, pool: ThreadPoolExecutor, remove: bool = True
    ) -> set[str]:
        """List every engine at once; remove what is found; return the names seen."""
        rounds = [(e, pool.submit(self._find, e, names, report)) for e in self.engines]
        seen: set[str] = set()
        for engine, fut in rounds:
            found = fut.result()
            seen.update(f.name for f in found)
            if remove:
                self._remove(engine, found, report)
        return seen

    def _delete_copies(self, paths: set[Path]) -> tuple[list[str], list[str]]:
        deleted, problems = [], []
        for path in sorted(paths):
            problem = delete_scratch(path)
            if problem:
                problems.append(problem)
            else:
                deleted.append(str(path))
        return deleted, problems
