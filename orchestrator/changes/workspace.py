"""Workspaces (issue 23): a persistent copy that keeps an agent's changes across its commands.

A plain command runs in a copy reset to the person's tree each time. A workspace, keyed by
(working directory, name), keeps what the agent's commands changed until it is applied or
discarded, while the person's own edits keep flowing in. Where it lives on disk and the
names of its parts: workspace_state.py.

Before each command (:meth:`Workspace.refresh`), with no other command of the workspace
running: A = the paths where ``tree`` differs from ``base`` (the agent's changes); base is
synced to the person's tree, listing the paths that changed (P). For each path of P: if it
overlaps no path of A, the person's version flows into ``tree``; if the agent's version equals
the person's, nothing is to do; else it is a **conflict**: the agent's version stays, the
person's is saved under ``theirs/`` and the result names it. While a command of the workspace
runs, nothing flows in and the result says so (a server started in the background must not
see its files change under it).

``changes`` is the difference between ``tree`` and ``base`` (= the person's tree as of the
last flow-in). ``apply`` keeps it as a change set and runs the normal apply (apply.py) on it:
its conflict checks (the person's stamps as the base sync read them) and whatever path rules
it holds; a named conflict is only applied when its path is chosen by name. Workspaces are
never evicted for the copy budget; a workspace over it refuses the next command. A flow-in
whose base sync fails is undone (workspace_flow.py): the workspace stays as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sprawl_orch.changes.apply import ApplyResult
from sprawl_orch.changes.changes import ChangeEntry, Changes
from sprawl_orch.changes.workspace_apply import apply_entries
from sprawl_orch.changes.workspace_diff import scan
from sprawl_orch.changes.workspace_flow import Flow, ended, take
from sprawl_orch.changes.workspace_merge import prune_emptied, settled
from sprawl_orch.changes.workspace_state import (
    BASE,
    BASES,
    CLEAN,
    FLOWING,
    LOCK,
    META,
    RUNNING,
    STAMPS,
    THEIRS,
    TREE,
    UNDO,
    Place,
    Refresh,
    WorkspaceView,
    check_name,
    isdir,
    listing,
    locked_by_other,
    remove_parts,
    replay_failed,
    workdir_key,
    workspaces_root,
)
from sprawl_orch.changes.workspace_walk import Clean, diff_walk, record_of
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.sync import sync_with_record
from sprawl_orch.core.credential_places import Guard
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.guard_memo import served_copy_guard
from sprawl_orch.core.private import private_dirs
from sprawl_orch.core.removal import delete_path

# Named here too: the CLI, the exec tool and the tests import them from this module.
__all__ = ["Refresh", "Workspace", "WorkspaceView", "check_name", "listing"]


class Workspace:
    """One workspace; all state is on disk, so several processes may hold one (each change
    of the state is under ``lock``)."""

    def __init__(
        self,
        state: Path,
        workdir: Path,
        name: str,
        bounds: Bounds | None = None,
        excludes: Excludes | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.name = check_name(name)
        self.state = Path(state)
        # What a link of the tree out of it may bring (design §5, issue 30): a workspace's
        # base and tree are copies like any other; the exec tool passes its own guard, the
        # CLI's workspace commands get one from the state directory and $HOME.
        self.guard = guard or served_copy_guard(os.environ.get("HOME"), (self.state,))
        self.workdir = Path(os.path.realpath(workdir))
        self.dir = workspaces_root(self.state) / workdir_key(self.workdir) / name
        self.place = Place(self.state, self.workdir, self.name, self.dir)
        self.bounds = bounds or Bounds()
        self.excludes = excludes or Excludes()
        # The clean pairs (workspace_walk.py) and the base's stamp record last read or made
        # by this object (a command's refresh, then its changes): from disk once per object.
        self._clean: Clean | None = None
        self._base: copy_stamps.SyncRecord | None = None
        self.last_mark = ""  # the running/ mark of the command this object started last

    @property
    def tree(self) -> Path:
        return self.dir / TREE

    @property
    def base(self) -> Path:
        return self.dir / BASE

    def exists(self) -> bool:
        return (self.dir / META).is_file() and self.tree.is_dir() and self.base.is_dir()

    # --- state ----------------------------------------------------------------------------

    def _meta(self) -> dict[str, object]:
        try:
            data = json.loads((self.dir / META).read_text())
        except (OSError, ValueError):
            # no or torn meta: a workspace not made yet (save writes it whole)
            return {}
        return data if isinstance(data, dict) else {}

    def conflicts(self, key: str = "conflicts") -> list[str]:
        """The named conflicts; ``key="bits_only"``: those on a directory's own bits alone
        (its entries are not part of them: workspace_flow.py)."""
        found = self._meta().get(key, [])
        return sorted(str(p) for p in found) if isinstance(found, list) else []

    def _save(self, conflicts: Sequence[str], bits_only: Sequence[str] | None = None) -> None:
        bits = set(self.conflicts("bits_only") if bits_only is None else bits_only)
        data = {"workdir": str(self.workdir), "name": self.name, "conflicts": sorted(conflicts)}
        data["bits_only"] = sorted(bits & set(conflicts))
        tmp = self.dir / (META + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.dir / META)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        private_dirs(self.dir)  # workspaces/ and the working directory's key too, 0700
        with open(self.dir / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def running(self, ended: str = "") -> int:
        """How many commands of this workspace run now (their lock files are held), but for
        the one whose mark is ``ended`` (it has ended; its lease is not released yet)."""
        # no running/ directory: no command has started here
        with contextlib.suppress(FileNotFoundError):
            marks = (self.dir / RUNNING).iterdir()
            return sum(locked_by_other(p) for p in marks if p.name != ended)
        return 0

    @contextlib.contextmanager
    def command(self, expect: bool = False) -> Iterator[Refresh]:
        """Around one command: refresh (unless others run), then mark it running until the
        block ends. ``expect``: the caller ran commands in it before (a session): a missing
        workspace is then reported as gone instead of made afresh."""
        with self._lock():
            refresh = self._refresh_locked(expect)
            (self.dir / RUNNING).mkdir(exist_ok=True, mode=0o700)
            mark = self.dir / RUNNING / secrets.token_hex(8)
            fd = os.open(mark, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.last_mark = mark.name
        try:
            yield refresh
        finally:
            # the mark may be gone with a discarded workspace
            with contextlib.suppress(OSError):
                mark.unlink()
            os.close(fd)

    def refresh(self, expect: bool = False) -> Refresh:
        with self._lock():
            return self._refresh_locked(expect)

    def _refresh_locked(self, expect: bool) -> Refresh:
        if not self.workdir.is_dir():
            raise self.place.refused_workdir()
        if not self.exists():
            if expect:
                raise self.place.lost()
            return self._create()
        if self.running():
            return Refresh(
                conflicts=self.conflicts(),
                held_back=True,
                note="the person's edits were held back: another command of this workspace "
                "is running; they flow in before the next command that starts alone",
            )
        return self._flow_in()

    def _sync_base(self, before: Callable[[str, bool], None] | None, keep: bool = False) -> None:
        _, self._base = sync_with_record(
            self.workdir,
            self.base,
            self.bounds,
            record=self.dir / STAMPS,
            excludes=self.excludes,
            guard=self.guard,
            before=before,
            keep=keep,
        )

    def _create(self) -> Refresh:
        for sub in (TREE, BASE, BASES, THEIRS, RUNNING, CLEAN, FLOWING, UNDO):
            delete_path(self.dir / sub)
        self._clean = None
        (self.dir / FLOWING).touch()  # base and its record agree once the sync ends
        self._sync_base(None)
        # From base, not the working directory: an edit between the two syncs would
        # otherwise look like the agent's.
        sync_with_record(self.base, self.tree, self.bounds, guard=self.guard)
        (self.dir / BASES).mkdir(mode=0o700)
        (self.dir / THEIRS).mkdir(mode=0o700)
        self._save([])
        (self.dir / FLOWING).unlink()
        self._diff(learn=True)
        return Refresh(created=True)

    def _flow_in(self) -> Refresh:
        """The person's edits since the last flow-in (workspace_flow.py); no command of the
        workspace runs (the callers checked)."""
        conflicts, bits = set(self.conflicts()), set(self.conflicts("bits_only"))
        flowed: list[str] = []
        new: list[str] = []
        merged: list[str] = []
        unmade: list[str] = []
        if os.path.lexists(self.dir / FLOWING):  # the last one was cut short: finish it
            copy_stamps.forget(self.dir / CLEAN)  # its pairs may vouch where base moved
            self._clean = None
            try:
                resumed = Flow.resume(self.dir, self.dir / FLOWING)
                flowed, new = resumed.replay(conflicts, bits)
                merged, unmade = resumed.merged, resumed.unmade
            except OSError as err:  # a full disk, say: the journal stays for the next command
                raise replay_failed(self.dir, self.name, self.tree, err) from err
        # The journal (workspace_flow.py); while it stands, _diff walks base instead of
        # trusting its record.
        (self.dir / FLOWING).write_bytes(b"")
        delete_path(self.dir / UNDO)  # a way back left by a flow killed while undoing
        flow = Flow(self.dir, self.dir / FLOWING)
        try:
            self._sync_base(flow.before, keep=True)
        except SprawlError as err:
            flow.close()
            self._base = None  # gone with the failed sync: the next one compares bytes
            self._clean = None
            raise flow.undone(self.dir / CLEAN, self.name, err) from err.__cause__
        finally:
            flow.close()
        delete_path(self.dir / UNDO)
        done = flow.finish(conflicts, bits)
        flowed, new = (a + b for a, b in zip((flowed, new), done, strict=True))
        clean = self._clean if self._clean is not None else Clean.load(self.dir / CLEAN)
        if clean.forget((*flow.judged, *flow.modes)):  # base moved on under those pairs
            clean.save(self.dir / CLEAN)
        self._clean = clean
        # A conflict ends once both sides hold the same again (a directory's bits, for one
        # on its bits alone).
        over = {c for c in conflicts if ended(self.tree, self.base, c, c in bits)}
        bases = self.dir / BASES
        prune_emptied(self.tree, self.base, bases, sorted(over))
        conflicts -= over
        self._save(sorted(conflicts), sorted(bits))
        (self.dir / FLOWING).unlink()
        settled(bases, merged + flow.merged, unmade + flow.unmade, over - bits, conflicts)
        return Refresh(flowed_in=flowed, conflicts=sorted(conflicts), new_conflicts=new)

    def _base_record(self) -> copy_stamps.SyncRecord:
        if os.path.lexists(self.dir / FLOWING):
            return record_of(self.base)  # a flow-in was cut short: the record may be stale
        if self._base is None:
            self._base = copy_stamps.load(self.dir / STAMPS)
        return self._base if self._base is not None else record_of(self.base)

    def base_bytes(self) -> int:
        """The bytes in the base's files, from its stamp record (the refresh's, in memory)."""
        if self._base is None:
            self._base = copy_stamps.load(self.dir / STAMPS)
        return self._base.total_bytes if self._base is not None else 0

    def _diff(self, learn: bool) -> list[ChangeEntry]:
        """tree against base in one walk of tree (workspace_walk.py), bytes skipped where the
        clean pairs vouch; ``learn`` (only with no command of the workspace running): record
        this comparison's pairs."""
        base = self._base_record()
        clean = self._clean_pairs()
        if not learn:
            return diff_walk(self.tree, self.base, base, clean)
        fresh = Clean()
        found = diff_walk(self.tree, self.base, base, clean, fresh)
        if fresh.dirty:
            fresh.save(self.dir / CLEAN)
        self._clean = fresh
        return found

    def _clean_pairs(self) -> Clean:
        if os.path.lexists(self.dir / FLOWING):
            return Clean()  # a flow-in was cut short: base moved under some pairs
        if self._clean is None:
            self._clean = Clean.load(self.dir / CLEAN)
            self._clean.dirty = False
        return self._clean

    # --- what the agent did, and what to do with it ---------------------------------------

    def show(self, ended: str = "") -> WorkspaceView:
        """The agent's changes and the conflicts. ``ended``: the mark (``last_mark``) of a
        command that has ended but whose lease is not yet released (the backlog computes a
        result's changes first): with no OTHER command running, this comparison's clean
        pairs are recorded for the next."""
        if not self.exists():
            raise self.gone()
        with self._lock():
            running = self.running(ended)
            entries = self._diff(learn=not running)
            conflicts = self.conflicts()
        return WorkspaceView(
            self.name,
            str(self.workdir),
            str(self.tree),
            entries,
            {c: str(self.dir / THEIRS / c) for c in conflicts},
            running,
        )

    def gone(self) -> SprawlError:
        return self.place.gone()

    def changes(self) -> Changes:
        view = self.show()
        return Changes.of(view.changes, handle=None)

    def apply(
        self,
        paths: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        protected: Sequence[str] = (),
        protected_globs: Sequence[str] = (),
        unprotect: Sequence[str] = (),
        conflicts_by_name: bool = True,
    ) -> ApplyResult:
        """Bring the agent's changes (all, or ``paths``) into the person's tree through the
        normal apply, under its rules (workspace_apply.py): a named conflict is held back
        unless its path is chosen by name (and ``conflicts_by_name``), and a protected path
        (core/protected.py) unless a person names it in ``protected``. serve and mcp pass
        neither: an agent can't consent for the person -- naming a conflict there wrote the
        agent's version over the person's edit, and a discard then removed the person's only
        other copy (attack6)."""
        if not self.workdir.is_dir():
            raise self.place.refused_workdir()
        with self._lock():
            if not self.exists():
                raise self.gone()
            if not self.running():
                self._flow_in()  # apply against the person's tree as it is now
            result = apply_entries(
                self.place,
                self._diff(learn=False),
                self.conflicts(),
                paths,
                dry_run=dry_run,
                protected=protected,
                protected_globs=protected_globs,
                unprotect=unprotect,
                conflicts_by_name=conflicts_by_name,
                bits_only=self.conflicts("bits_only"),
            )
            if not dry_run and not self.running():
                self._flow_in()  # what was applied is now in the person's tree: base too
            return result

    def take(self, rel: str) -> None:
        """Take the person's version of ``rel`` into the workspace (ends its conflict)."""
        rel = rel.strip("/")
        with self._lock():
            if not self.exists():
                raise self.gone()
            if rel not in self.conflicts():
                raise SprawlError(
                    ErrorCode.BAD_REQUEST,
                    rel,
                    f"not a conflict of workspace {self.name!r}",
                    f"see them with: sprawl-orch workspace show {self.name}",
                )
            self._save(take(self.dir, rel, self.conflicts(), self.conflicts("bits_only")))

    def discard(self) -> None:
        """Drop the workspace: the next command in it starts from the person's tree."""
        with self._lock():
            if not self.exists():
                raise self.gone()
            remove_parts(self.dir)
        # another command's lock or entry keeps the directory: left
        with contextlib.suppress(OSError):
            (self.dir / LOCK).unlink()
            self.dir.rmdir()
            self.dir.parent.rmdir()

    def size(self) -> int:
        return sum(st.st_size for st in scan(self.dir).values() if not isdir(st))
