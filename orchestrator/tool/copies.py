"""An exec tool's copies of its working directory (design §5).

Each sandboxed command leases a free slot of the working directory's persistent copy
(copy_store: kept between CLI calls, resynced rather than rebuilt), syncs it, and releases
it once the command is collected -- a backgrounded command keeps its slot until then. Before
the command starts, the synced copy's stamps are recorded, so that `changes` can say what the
command changed in it afterwards (change_record, changes, change_store).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sprawl_orch.changes import record as change_record
from sprawl_orch.changes.changes import Changes
from sprawl_orch.changes.changes import compute as compute_changes
from sprawl_orch.changes.store import keep as keep_changes
from sprawl_orch.config import Config
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.store import CopyStore, Lease, copy_key
from sprawl_orch.copy.sync import FileWork
from sprawl_orch.copy.walk import Progress
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.protected import protection_for
from sprawl_orch.runs.launch import Arm


class ToolCopies:
    """The copy slots of one working directory and config, leased one per command."""

    def __init__(self, config: Config, workdir: Path, state: Path) -> None:
        copies = config.sandbox.copy_
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

    def lease(self, progress: Progress | None = None) -> tuple[Lease, FileWork]:
        """A free slot, synced with the working directory now."""
        lease = self.store.lease(self.workdir, copy_key(self.workdir, self.config_json))
        try:
            work = lease.sync(self.workdir, self.bounds, self.excludes, progress)
        except BaseException:
            lease.release()  # a refused sync already deleted the half-synced copy
            raise
        return lease, work

    def release(self, lease: Lease) -> None:
        """A collected command's copy: released for the next command or CLI call; copies past
        the disk budget are evicted, this one last."""
        lease.release()
        try:
            self.store.evict(keep=lease.slot)
        except OSError as err:  # design §5: a copy that cannot be deleted never fails a command
            self.problem = self.problem or f"evicting copies failed: {err}"

    def changes_hook(self, arm: Arm, lease: Lease) -> Callable[[str], Changes]:
        """Record the synced, readied copy now; the returned call computes and keeps the
        command's changes once it has ended (never failing the command: a failure is a note)."""
        copy = lease.path
        ready = getattr(arm, "ready_copy", None)
        # An arm that re-owned entries of the copy changed their ctimes after the sync took
        # their stamps: walk the copy again rather than compare the bytes of each.
        reowned = ready is not None and ready(copy) is not False
        record = change_record.finish(copy, lease.last_record, self.workdir, walk=reowned)

        def collect(handle: str) -> Changes:
            try:
                found = compute_changes(record, self.workdir, copy)
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
