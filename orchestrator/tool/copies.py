"""An exec tool's copies of its working directory (design §5).

Each sandboxed command leases a free slot of the working directory's persistent copy
(copy_store: kept between CLI calls, resynced rather than rebuilt), syncs it, and releases
it once the command is collected -- a backgrounded command keeps its slot until then. Before
the command starts, the synced copy's stamps are recorded, so that `changes` can say what the
command changed in it afterwards (change_record, changes, change_store).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.changes import record as change_record
from sprawl_orch.changes.changes import Changes
from sprawl_orch.changes.changes import compute as compute_changes
from sprawl_orch.changes.store import keep as keep_changes
from sprawl_orch.changes.workspace import Refresh, Workspace
from sprawl_orch.config import Config
from sprawl_orch.copy import memory as copy_memory
from sprawl_orch.copy import writers
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.memory import Observed
from sprawl_orch.copy.store import CopyStore, Lease, copy_key
from sprawl_orch.copy.sync import FileWork
from sprawl_orch.copy.walk import Progress
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.assurances import Kept
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.guard_memo import served_copy_guard
from sprawl_orch.core.protected import protection_for
from sprawl_orch.runs.launch import Arm


class ToolCopies:
    """The copy slots of one working directory and config, leased one per command."""

    def __init__(
        self, config: Config, workdir: Path, state: Path, caller_home: str | None = None
    ) -> None:
        copies = config.sandbox.copy_
        # What a link of the tree out of it may bring into the copy (design §5): judged
        # against the caller's homes and sprawl-orch's own places, as the native view is.
        scratch = config.sandbox.scratch_dir
        places = (state, *((scratch.expanduser(),) if scratch is not None else ()))
        self.guard = served_copy_guard(caller_home, places)
        self.store = CopyStore(state / "copies", copies.budget_bytes)
        self.bounds = Bounds(copies.max_files, copies.max_bytes, copies.max_depth)
        self.excludes = Excludes(copies.exclude)
        self.workdir = workdir
        self.state = state
        self.config_json = config.sandbox.model_dump_json(by_alias=True)
        self.changes_budget = config.state.changes_budget_bytes
        self.protect = (config.apply.protected, config.apply.unprotect)
        # The first eviction failure; never fails a command. (No surface prints it yet.)
        self.problem: str | None = None
        self.warm = config.sandbox.container.warm
        # What each slot's `changes` walk saw, until its release keeps it as a memory.
        self._seen: dict[Path, Observed] = {}

    def lease(self, progress: Progress | None = None) -> tuple[Lease, FileWork]:
        """A free slot, synced with the working directory now (trusting a memory of its copy's
        side where the gate lets it through: design §5.1)."""
        lease = self.store.lease(self.workdir, copy_key(self.workdir, self.config_json))
        try:
            # recall forgets it before it is used: a resync killed midway leaves no memory
            memory = copy_memory.gate(
                copy_memory.recall(os.path.abspath(lease.record_path)),
                lease.found_token,
                lease.path,
                lease.record_path,
                writers.ran(self.state),
            )
            work = lease.sync(
                self.workdir, self.bounds, self.excludes, progress, self.guard, memory
            )
        except BaseException:
            lease.release()  # a refused sync already deleted the half-synced copy
            raise
        return lease, work

    def release(self, lease: Lease) -> None:
        """A collected command's copy: released for the next command or CLI call; copies past
        the disk budget are evicted, this one last. What the `changes` walk saw of it is kept
        as a memory for the next lease (design §5.1), if the command's arm may leave one."""
        seen = self._seen.pop(lease.slot, None)
        value = None
        if seen is not None:
            # the copy or its record is gone: nothing to remember
            with contextlib.suppress(OSError):
                root, rec = os.lstat(lease.path), os.stat(lease.record_path)
                value = copy_memory.value_of(lease.token, root, rec, seen)
        lease.release()
        if value is not None:
            copy_memory.keep(os.path.abspath(lease.record_path), value)
        try:
            self.store.evict(keep=lease.slot)
        except OSError as err:  # design §5: a copy that cannot be deleted never fails a command
            self.problem = self.problem or f"evicting copies failed: {err}"

    def _may_remember(self, arm: Arm) -> bool:
        """Whether the `changes` walk after a command of ``arm`` may leave a memory of the copy
        (design §5.1): every process that could write it is known dead by then (process_tree,
        its clean-up finished before `changes`: runs/backlog.py), it wrote nothing else in
        place (filesystem), and it shared no socket with another command to pass an open file
        of the copy over (network). A warm container outlives the command: never. An arm that
        notes itself a writer of the copies (landlock: copy/writers.py) would void the memory
        before any lease could trust it: none is kept."""
        held = arm.assurances()
        axes = (held.filesystem, held.process_tree, held.network)
        warm = arm.name is ArmName.CONTAINER and self.warm
        reaches = writers.reaches_copies(arm.name, held)
        return all(a is Kept.YES for a in axes) and not warm and not reaches

    def changes_hook(self, arm: Arm, lease: Lease) -> Callable[[str], Changes]:
        """Record the synced, readied copy now; the returned call computes and keeps the
        command's changes once it has ended (never failing the command: a failure is a note)."""
        copy = lease.path
        ready = getattr(arm, "ready_copy", None)
        # An arm that re-owned entries of the copy changed their ctimes after the sync took
        # their stamps: walk the copy again rather than compare the bytes of each.
        reowned = ready is not None and ready(copy) is not False
        record = change_record.finish(copy, lease.last_record, self.workdir, walk=reowned)
        remember = self._may_remember(arm)

        def collect(handle: str) -> Changes:
            try:
                seen = Observed() if remember else None
                found = compute_changes(record, self.workdir, copy, seen)
                if seen is not None:
                    self._seen[lease.slot] = seen
                guard = None
                if found:  # the person's git config, read now: what it points at is protected
                    guard = protection_for(self.protect[0], self.protect[1], self.workdir)
                return keep_changes(
                    self.state,
                    handle,
                    self.workdir,
                    copy,
                    record,
                    found,
                    self.changes_budget,
                    guard,
                )
            except (OSError, SprawlError) as err:
                return Changes(handle=handle, note=f"changes could not be computed: {err}")

        return collect


@dataclass
class WorkspaceLease:
    """One command's hold on a workspace (changes/workspace.py): its tree is the copy the
    command runs in; ``release`` marks the command ended (the person's edits may flow in)."""

    workspace: Workspace
    refresh: Refresh
    _hold: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def path(self) -> Path:
        return self.workspace.tree

    def release(self) -> None:
        self._hold.close()


def _over_budget(ws: Workspace, budget: int) -> SprawlError | None:
    # The tree holds about what the base holds (plus the agent's additions, minus its
    # deletions); the base's size is known from its stamp record without a walk.
    size = 2 * ws.base_bytes()
    if size <= budget:
        return None
    return SprawlError(
        ErrorCode.COPY_BOUND,
        ws.name,
        f"workspace {ws.name!r} holds about {size:,} bytes (its copy and its base), over the "
        f"copy budget of {budget:,} bytes ([sandbox.copy] budget_bytes); a workspace is never "
        "evicted, so no command runs in it until it is smaller",
        f"apply its changes (sprawl-orch apply --workspace {ws.name}) and discard it "
        f"(sprawl-orch workspace discard {ws.name}), or raise [sandbox.copy] budget_bytes",
    )


def lease_workspace(copies: ToolCopies, name: str, seen: bool) -> WorkspaceLease:
    """Hold workspace ``name`` for one command: the person's edits flow in first (unless
    another command of it runs). ``seen``: this tool ran commands in it before, so a missing
    one is gone (said so), not new."""
    ws = Workspace(copies.state, copies.workdir, name, copies.bounds, copies.excludes, copies.guard)
    hold = contextlib.ExitStack()
    refresh = hold.enter_context(ws.command(expect=seen))
    refused = _over_budget(ws, copies.store.budget_bytes)
    if refused is not None:
        hold.close()
        raise refused
    return WorkspaceLease(ws, refresh, hold)


def workspace_changes(lease: WorkspaceLease) -> Callable[[str], Changes]:
    """The result's `changes` of a command in a workspace: the workspace's whole difference
    from the person's tree (three-way against its base), its conflicts, what flowed in."""
    ws, refresh = lease.workspace, lease.refresh
    mark = ws.last_mark

    def collect(handle: str) -> Changes:
        try:
            view = ws.show(ended=mark)
        except (OSError, SprawlError) as err:
            return Changes(note=f"workspace {ws.name!r}: changes could not be computed: {err}")
        notes = [f"workspace {ws.name!r}: the agent's changes against the person's tree"]
        if refresh.created:
            # A new process can't tell a first use from a state directory deleted since the
            # last command (issue 23: say so, never pretend): the note says both.
            notes.append(
                f"made now from the person's tree: no workspace {ws.name!r} was kept for "
                "this directory (a new name, or its state directory was deleted, and any "
                "changes in it with it)"
            )
        if refresh.flowed_in:
            notes.append(f"the person's edits flowed in first: {', '.join(refresh.flowed_in)}")
        if refresh.held_back and refresh.note:
            notes.append(refresh.note)
        if view.conflicts:
            kept = "; ".join(f"{p} (the person's version: {w})" for p, w in view.conflicts.items())
            notes.append(f"conflicts, changed on both sides: {kept}")
        return Changes.of(view.changes, note="; ".join(notes))

    return collect


def releaser(copies: ToolCopies, copy: Lease | WorkspaceLease | None) -> Callable[[], None] | None:
    """How a command's copy goes back when it ends: a workspace's own release, a copy slot
    through its store (kept for the next command), nothing for the host."""
    if isinstance(copy, WorkspaceLease):
        return copy.release
    if copy is None:
        return None
    lease = copy

    def release() -> None:
        copies.release(lease)

    return release
