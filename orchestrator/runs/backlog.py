"""The backlog: every command of an exec tool while it runs, grouped by run (design §11, D29).

A command enters the table when it starts and leaves it when it is *collected*, exactly once:
settled by the exec that started it (within its window, or killed at it), harvested after it
finished in the background, halted, or released with its run. Whoever claims an entry under the
lock collects it; an exec whose command was claimed by `release` returns that same result.

Each run may get its own cgroup (cgroups.py) when the backlog's `Shares` ask for one: made for
the run's first command, joined by every host command of the run before it execs, and removed
(after killing what is left in it) when the run is released or the backlog closes. The memory
ceiling is marked when a command enters and judged when it is collected (ceiling.py).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.changes.changes import Changes
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.removal import delete_quietly
from sprawl_orch.runs.affinity import (
    Absent,
    CreationRefused,
    JobCreated,
    RunJobState,
    Unrequested,
    affinity_of,
    enter_job,
)
from sprawl_orch.runs.backlog_entry import (
    Entry,
    Pending,
    RunProcesses,
    background_result,
    started_of,
)
from sprawl_orch.runs.ceiling import (
    CeilingMark,
    NotAsked,
    Unapplied,
    Unread,
    Watching,
    Why,
    ceiling_at,
)
from sprawl_orch.runs.cgroup_run import Joining, RunGroup
from sprawl_orch.runs.cgroups import CgroupRefused, Cgroups, Delegation, PlatformShares
from sprawl_orch.runs.launch import Launch, Running, Watcher
from sprawl_orch.runs.output_keep import OutputKeeping
from sprawl_orch.runs.results import (
    ExecResult,
    never_ran,
    settled,
)
from sprawl_orch.runs.shares import UNSET, Shares

__all__ = ["Backlog", "Entry", "Pending", "RunProcesses"]


@dataclass
class _Run:
    job: RunJobState = field(default_factory=Absent)
    group: RunGroup | None = None
    refused: str = ""


class Backlog:
    def __init__(
        self,
        session: str,
        shares: Shares = UNSET,
        *,
        found: Delegation | None = None,
        keep_root: Path | None = None,
        keeping: OutputKeeping | None = None,
        cgroups: Cgroups | None = None,
    ) -> None:
        """`keeping`: where and how much of long output is kept (output_keep.py);
        `keep_root` alone: that directory with the default bounds."""
        self.session = session
        self.shares = shares
        self._found = found
        self._cgroups = cgroups
        self.keeping = keeping or (OutputKeeping(keep_root) if keep_root else None)
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._runs: dict[str, _Run] = {}
        self._closed = False
        self._closed_why = "the exec tool is closed: every run was released"
        self._numbers = itertools.count(1)
        # Gives the guardian to tell of each cgroup made (called once, when the first is made).
        self._watcher: Callable[[], Watcher] | None = None

    def watch_with(self, watcher: Callable[[], Watcher]) -> None:
        """The exec tool's guardian hears of our cgroups; with a shared backlog (serve), the
        first tool's, which serve closes after the backlog."""
        with self._lock:
            self._watcher = self._watcher or watcher

    def number(self) -> int:
        """The next command's number: handles are `<session>-<n>`, unique per backlog."""
        with self._lock:
            return next(self._numbers)

    @property
    def found(self) -> Delegation:
        if self._found is None:
            from sprawl_orch.runs.cgroups import delegation

            self._found = self._cgroups.found if self._cgroups else delegation()
        return self._found

    # -- entering ---------------------------------------------------------------------
    def check_open(self) -> None:
        """Refuse a new command once the backlog is closed (before anything is copied)."""
        with self._lock:
            self._refuse_if_closed()

    def joining(self, run: str) -> Joining | None:
        """The run's cgroup for a command about to start (made for the run's first command)."""
        with self._lock:
            self._refuse_if_closed()
            if self.shares.kind == "unset":
                return None
            state = self._runs.setdefault(run, _Run())
            if state.group is None and self.found.shares is not PlatformShares.NONE:
                state.group = self._create(run, state)
            return state.group.joining() if state.group else None

    def _create(self, run: str, state: _Run) -> RunGroup | None:
        asked = self.shares
        if self.found.shares is PlatformShares.CPU:
            asked = Shares(kind="cpu")  # the memory half is not ours to give: said per command
        if self._cgroups is None:
            watcher = self._watcher() if self._watcher is not None else None
            self._cgroups = Cgroups(self.found, self.session, watcher=watcher)
        try:
            group = self._cgroups.create(run, asked)
        except CgroupRefused as err:
            state.job = enter_job(state.job, CreationRefused())
            state.refused = str(err)
            return None
        # Linux applies no affinity mask: the attempt is Unrequested, the run reads "os".
        state.job = enter_job(state.job, JobCreated(Unrequested()))
        return group

    def enter(
        self,
        running: Running,
        launch: Launch,
        pending: Pending,
        join: Joining | None,
        release_copy: Callable[[], None] | None = None,
        changes: Callable[[str], Changes] | None = None,
        drain: Callable[[], None] | None = None,
        streams_done: Callable[[], None] | None = None,
    ) -> Entry:
        followed = pending.arm is ArmName.CONTAINER or (join is not None and join.joined is True)
        with self._lock:
            state = self._runs.setdefault(launch.run, _Run())
            entry = Entry(
                launch.tag,
                launch.run,
                running,
                launch,
                pending,
                self._mark(state, join, pending.arm),
                followed,
                release_copy,
                changes,
                drain,
                streams_done,
            )
            self._entries[entry.handle] = entry
            if self._closed:  # closed while this command was starting: it goes at once
                entry.claimed = True
                del self._entries[entry.handle]
        if entry.claimed:
            self._collect(entry, kill=True, detail="the exec tool closed while it started")
        return entry

    def _mark(self, state: _Run, join: Joining | None, arm: ArmName) -> CeilingMark:
        limit = self.shares.limit_bytes
        if limit is None:
            return NotAsked()
        found = self.found
        if not found.platform_has_cgroups:
            return Unapplied(limit, Why.PLATFORM, found.why)
        if found.shares is not PlatformShares.CPU_AND_MEMORY:
            return Unapplied(limit, Why.NOT_DELEGATED, found.why)
        if state.group is None:
            return Unapplied(limit, Why.REFUSED, state.refused)
        if join is None or join.joined is not True:
            said = (
                join.error
                if join and join.error
                else f"the {arm.value} arm's processes "
                "are not host processes of ours (a container has its own cgroup)"
            )
            return Unapplied(limit, Why.UNJOINED, said)
        if join.before is None:
            return Unread(limit, "the run's OOM count could not be read when it started")
        return Watching(limit, join.before)

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise SprawlError(
                ErrorCode.TOOL_UNAVAILABLE,
                "exec tool",
                f"{self._closed_why}; nothing was run",
                "start a new exec tool (or a new sprawl-orch serve)",
            )

    # -- collecting ---------------------------------------------------------------------
    def _claim(self, entry: Entry) -> bool:
        with self._lock:
            if entry.claimed:
                return False
            entry.claimed = True
            self._entries.pop(entry.handle, None)
            return True

    def settle(self, entry: Entry, in_time: bool, background_ok: bool) -> ExecResult:
        """The end of an exec's window: collect it, kill it, or hand it to the backlog."""
        if not in_time and background_ok:
            with self._lock:
                if not entry.claimed:
                    entry.background = True
                    return background_result(entry)
        if self._claim(entry):
            detail = None
            if not in_time:
                detail = f"the window of {entry.pending.window:g} s passed; the command was killed"
            return self._collect(entry, kill=not in_time, detail=detail)
        entry.done.wait()
        if entry.result is None:
            raise SprawlError(
                ErrorCode.STORAGE_FATAL,
                entry.handle,
                "the command was collected by another caller and its result could not be read",
                "see the ledger for what was recorded",
            )
        return entry.result

    def harvest(self) -> list[ExecResult]:
        """Full results of background commands that have finished, each returned once."""
        with self._lock:
            ready = [e for e in self._entries.values() if e.background and not e.claimed]
        finished = [e for e in ready if e.running.wait(0) and self._claim(e)]
        return [self._collect(e, kill=False, detail=None) for e in finished]

    def halt(self, handle: str) -> ExecResult:
        with self._lock:
            entry = self._entries.get(handle)
        if entry is None or not self._claim(entry):
            raise SprawlError(
                ErrorCode.UNKNOWN_HANDLE,
                handle,
                "no command in the backlog has this handle "
                "(it finished and was harvested, was halted or released, or never existed)",
                "list what runs with processes(), or harvest() finished commands",
            )
        return self._collect(entry, kill=True, detail="halted")

    def release(self, run: str) -> list[ExecResult]:
        """Kill every command of `run` and remove its cgroup; their results, killed."""
        with self._lock:
            entries = [e for e in self._entries.values() if e.run == run and not e.claimed]
            for entry in entries:
                entry.claimed = True
                self._entries.pop(entry.handle, None)
            state = self._runs.pop(run, None)
        group = state.group if state is not None else None
        results = [
            self._collect(e, kill=True, detail=f"run {run!r} was released", group=group)
            for e in entries
        ]
        if state is not None and state.group is not None and self._cgroups is not None:
            self._cgroups.remove(state.group)
        return results

    def processes(self) -> dict[str, RunProcesses]:
        with self._lock:
            entries = list(self._entries.values())
            runs = dict(self._runs)
        report: dict[str, RunProcesses] = {}
        with_group = {run for run, state in runs.items() if state.group is not None}
        for run in sorted({e.run for e in entries} | with_group):
            mine = [e for e in entries if e.run == run]
            state = runs.get(run, _Run())
            pids: set[int] = set(state.group.pids()) if state.group else set()
            for entry in mine:
                pids.update(entry.running.pids())
            report[run] = RunProcesses(
                pids=sorted(pids),
                unfollowed=sum(1 for e in mine if not e.followed),
                share=state.group.held if state.group else UNSET,
                affinity=affinity_of(state.job),
            )
        return report

    def close(self, why: str | None = None) -> str | None:
        """Refuse new commands, release every run, remove our cgroups. Says what stayed."""
        with self._lock:
            self._closed = True
            self._closed_why = why or self._closed_why
            runs = {e.run for e in self._entries.values()} | set(self._runs)
        for run in sorted(runs):
            self.release(run)
        return self._cgroups.close() if self._cgroups is not None else None

    # -- results --------------------------------------------------------------------------
    def _collect(
        self, entry: Entry, *, kill: bool, detail: str | None, group: RunGroup | None = None
    ) -> ExecResult:
        try:
            if kill:
                entry.running.kill()
            entry.running.wait(None)
            finished = entry.running.finish()
            if entry.streams_done is not None:
                entry.streams_done()
            if entry.drain is not None:
                entry.drain()
            if group is None:
                with self._lock:
                    group = self._runs.get(entry.run, _Run()).group
            verdict = ceiling_at(entry.mark, group.oom_count() if group else None)
            keeping = self.keeping or OutputKeeping(entry.launch.outputs, keep_bytes=0)
            out, err, kept_output = keeping.keep(
                entry.handle,
                finished.stdout_path,
                finished.stderr_path,
                keep=self.keeping is not None and not entry.drain,
            )
            stdout, stderr = (out.text, out.full), (err.text, err.full)
            delete_quietly(entry.launch.outputs)
            container = dict(finished.extra.get("container", {}))  # type: ignore[call-overload]
            if finished.refusal is not None:
                # Started, but the program never ran: a refusal like any other arm's.
                entry.result = never_ran(started_of(entry), finished.refusal, container or None)
                return entry.result
            changes = entry.changes(entry.handle) if entry.changes is not None else None
            entry.result = settled(
                started_of(entry),
                finished,
                stdout=stdout,
                stderr=stderr,
                detail=detail,
                memory_ceiling=verdict.as_result(),
                container=container or None,
                network=finished.extra.get("network"),  # type: ignore[arg-type]
                background_handle=entry.handle if entry.background else None,
                changes=changes,
                kept_output=kept_output,
            )
            return entry.result
        finally:
            if entry.release_copy is not None:
                entry.release_copy()
            entry.done.set()
