"""The state of one sync pass (copy/walk.py runs it): its inputs, counts, the new stamp record,
and the bounds' refusals. Split from walk.py (#28: files under ~400 lines) at its seam: this
module holds what a walk knows and counts, walk.py the order in which it visits entries and
the rule applied to each."""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sprawl_orch.copy import refusals, source
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.fileops import BudgetExceeded, FdCopy, Kind, SourceUnreadable
from sprawl_orch.copy.pool import CopyPool, inflight_cap
from sprawl_orch.copy.side import PROGRESS_EVERY, CopySide, FileWork, Progress
from sprawl_orch.copy.source import SourceFile
from sprawl_orch.copy.stamps import ENTRY, SyncRecord
from sprawl_orch.core import fs_clock
from sprawl_orch.core.credential_places import Guard
from sprawl_orch.core.errors import CopyBoundError

H = TypeVar("H")
_NO_ENTRY = bytes(ENTRY.size)  # the record entry of a file being written, filled in once settled
KIND_AND_BITS = stat.S_IFMT(0o177777) | 0o7777
ENTRY_SIZE = ENTRY.size


@dataclass
class SyncDir(Generic[H]):
    """One directory being synced: source path, path relative to the root, whether it was
    reached without following a link (only then may its links stay links), the open copy
    directory and what it held."""

    src: str
    rel: str
    real: bool
    handle: H
    depth: int
    ident: tuple[int, int]
    entries: list[os.DirEntry[str]]
    copy: dict[str, Kind]
    times: tuple[int, int]  # the source directory's (atime_ns, mtime_ns), set once it is done
    # The source directory held open (copy/source.py: its entries are opened relative to it,
    # never through a path a rename could redirect); -1 where there are no directory fds.
    src_fd: int = -1

    def __post_init__(self) -> None:
        self.it = iter(self.entries)
        self.ctimes: dict[str, int] = {}  # of the copy files settled here
        # Files of this directory a copy worker (copy/pool.py) has not finished: its copy fd
        # stays open, and its times wait, until they are settled.
        self.pending = 0
        self.left = False  # every entry walked and the extras removed


# A file handed to a copy worker: its directory, name, record entry offset, judged stat, bits,
# and the bytes the bound holds for it until settled.
_Token = tuple[SyncDir[H], str, int, os.stat_result, int, int]


@dataclass
class WalkState(Generic[H]):
    side: CopySide[H]
    source: str  # resolved: the walk must not depend on the caller's cwd or links
    bounds: Bounds
    subject: str  # the working directory as the caller named it
    excludes: Excludes = field(default_factory=Excludes)
    old: SyncRecord | None = None
    progress: Progress | None = None
    # Judges what a link out of the tree leads to (None: everything, as the bare sync does;
    # ToolCopies always gives one).
    guard: Guard | None = None
    created: int = 0
    rewritten: int = 0
    removed: int = 0
    walked: int = 0
    files: int = 0
    bytes: int = 0
    # Whether the new record says anything the old one does not: a sync that changed nothing
    # and trusted every file keeps the old record (same stamps, same paths) unwritten.
    dirty: bool = False
    # When a list: every path (os.sep-separated) the sync created, replaced or removed in the
    # copy, directories by their own path (workspaces: the person's changes since the base).
    touched: list[str] | None = None
    # When given: called with a path (os.sep-separated) just BEFORE the sync creates,
    # replaces or removes it in the copy (False), or changes only an existing directory's
    # permission bits (True) -- while the copy still holds the old entry, which a workspace
    # compares with the agent's (changes/workspace.py) instead of diffing whole trees.
    before: Callable[[str, bool], None] | None = None

    def __post_init__(self) -> None:
        self._ctimes: dict[str, dict[str, int]] = {}
        self.new = SyncRecord(
            self.source,
            time.time_ns(),
            fs_clock.TICK_MARGIN_NS,
            self.excludes.patterns,
            copy_ctimes=self._ctimes,
        )
        self._line = self.new.started_ns - self.new.granularity_ns
        # Looked up once per sync (and replaceable in tests that simulate a coarse clock).
        self._pack = copy_stamps.pack
        old = self.old
        self._edge = old.started_ns - old.granularity_ns if old else 0
        self._offsets = old.offsets() if old else {}
        self._old_entries = old.entries if old else bytearray()
        # Devices whose filesystems stamp files finely enough for the racy-clean rule.
        self._timed: set[int] = set()  # devices fs_clock knows the margin of
        self._untimed: set[int] = set()
        self._add_path, self._entries = self.new.paths.append, self.new.entries
        # The inlined fast path (run) needs directory fds (FdCopy) and no excludes to match.
        self._quick_ok = old is not None and isinstance(self.side, FdCopy) and not self.excludes
        self._lstat = os.stat
        self._ancestors: set[tuple[int, int]] = set()
        self.refused: list[str] = []
        self.skipped: list[str] = []
        self.skipped_more = 0
        # New files are written by copy workers where the copy side is directory fds; each job's
        # token: (directory, name, offset of its record entry, judged stat, bits, bytes held).
        self._pool: CopyPool[_Token[H]] | None = (
            CopyPool() if isinstance(self.side, FdCopy) else None
        )
        self._waiting: list[SyncDir[H]] = []  # left, with files still being written
        self._cap = inflight_cap() if self._pool is not None else 0

    def work(self) -> FileWork:
        more = (f"… and {self.skipped_more} more",) if self.skipped_more else ()
        return FileWork(
            created=self.created,
            rewritten=self.rewritten,
            removed=self.removed,
            walked=self.walked,
            excluded=self.excludes.patterns,
            refused_links=tuple(self.refused),
            skipped=(*self.skipped, *more),
        )

    def refuse(
        self,
        detail: str,
        key: str,
        recovery: str | None = None,
        *,
        bound: str | None = None,
        reached: int | None = None,
    ) -> CopyBoundError:
        """E_COPY_BOUND (copy.refusals.refusal) for this walk's source and bounds."""
        return refusals.refusal(
            self.source,
            self.subject,
            self.excludes,
            self.bounds,
            detail,
            key,
            recovery,
            bound=bound,
            reached=reached,
        )

    def refuse_depth(self, rel: str, level: int, why: str) -> CopyBoundError:
        return self.refuse(
            *refusals.depth_detail(rel, level, why, self.bounds), bound="depth", reached=level
        )

    def _count(self, size: int) -> None:
        self.files += 1
        if self.files > self.bounds.files:
            detail, key = refusals.files_detail(self.files, self.bytes, self.bounds)
            raise self.refuse(detail, key, bound="files", reached=self.files)
        if self.bytes + size > self.bounds.bytes:
            raise self._over_bytes(self.bytes + size)
        if self.progress is not None and self.files % PROGRESS_EVERY == 0:
            self.progress(self.files, self.bytes, False)

    def _over_bytes(self, reached: int) -> CopyBoundError:
        detail, key = refusals.bytes_detail(reached, self.files, self.bounds)
        return self.refuse(detail, key, bound="bytes", reached=reached)

    def _learn(self, dev: int) -> bool:
        """Whether the racy-clean rule may trust stamps on ``dev`` (looked up once)."""
        if dev not in self._untimed and fs_clock.granularity_ns(dev) is not None:
            self._timed.add(dev)
            return True
        self._untimed.add(dev)
        return False

    def _counted(self, fresh: bool) -> None:
        self.created += fresh
        self.rewritten += not fresh

    def _uncount(self, rel: str) -> None:
        self.files -= 1
        if self.new.recent and self.new.recent[-1] == rel:
            self.new.recent.pop()

    def _link(
        self, parent: SyncDir[H], name: str, rel: str, target: str, times: tuple[int, int]
    ) -> None:
        self._count(0)
        side, handle = self.side, parent.handle
        old = parent.copy.pop(name, None)
        self.new.links[rel] = target
        if old == "other" and side.readlink(name, handle) == target:
            side.set_link_times(name, handle, *times)
            return
        fresh = True
        if self.before is not None:
            self.before(rel, False)
        if old == "dir":
            self.removed += side.remove(name, handle, old)
        elif old is not None:
            side.remove(name, handle, old)
            fresh = False
        self.dirty = True
        side.symlink(target, name, handle)
        side.set_link_times(name, handle, *times)
        self._counted(fresh)
        if self.touched is not None:
            self.touched.append(rel)

    # -- copy workers (copy/pool.py): the walk hands out new files and settles them in order --

    def _hand_out(
        self, parent: SyncDir[H], src: SourceFile, name: str, rel: str, mode: int
    ) -> None:
        """Open the judged source (every check of copy/source.py, here on the walk's thread:
        SourceChanged leaves nothing created) and give the rest of its copy to a worker. Its
        record entry and ctime keep the walk's order (deterministic record); the bytes bound
        holds its size until the worker says how much it copied."""
        pool = self._pool
        assert pool is not None
        try:
            sfd, sst = src.open()
        except SourceUnreadable as err:
            cause = err.__cause__
            if not (
                isinstance(cause, OSError)
                and cause.errno in (errno.EMFILE, errno.ENFILE)
                and pool.inflight
            ):
                raise
            # Out of descriptors while jobs hold some (another thread of the caller took
            # some, or the cap's count missed some): settle them all, hold fewer from now on.
            self._cap = max(1, pool.inflight // 2)
            self._drain()
            sfd, sst = src.open()
        token = (parent, name, len(self._entries), src.st, mode, sst.st_size)
        budget = self.bounds.bytes - self.bytes
        try:  # handle: a directory fd (the pool exists only with FdCopy)
            pool.submit(token, sfd, sst, src.path, name, parent.handle, mode, budget)  # type: ignore[arg-type]
        except BaseException:
            os.close(sfd)  # no worker owns it
            raise
        self._add_path(rel)
        self._entries += _NO_ENTRY
        parent.ctimes[name] = 0
        parent.pending += 1
        self.bytes += sst.st_size
        if pool.inflight < self._cap:
            self._settle(False)
            return
        # Full: wait until half are settled, not one by one (each wait is a wake-up of this
        # thread, which on a busy machine costs a scheduler's time slice).
        while pool.inflight > self._cap // 2:
            self._settle(True)

    def _settle(self, block: bool) -> None:
        """Take in what the workers finished; raise the first failure (the walk's caller
        then stops the rest: _stop)."""
        pool = self._pool
        if pool is None:
            return
        for token, result, err in pool.settled(block):
            parent, name, at, st, mode, held = token
            parent.pending -= 1
            if err is not None:
                if isinstance(err, BudgetExceeded):
                    raise self._over_bytes(self.bounds.bytes + 1) from None
                raise err
            assert result is not None
            size, cst = result
            self.bytes += size - held
            if self.bytes > self.bounds.bytes:  # a file grew while other files were copied
                raise self._over_bytes(self.bytes)
            parent.ctimes[name] = cst.st_ctime_ns
            self._entries[at : at + ENTRY_SIZE] = self._pack(st, cst, mode)
            if parent.left and not parent.pending:
                self._waiting.remove(parent)
                self._finish(parent)

    def _leave(self, frame: SyncDir[H]) -> None:
        """A directory whose entries were all walked and extras removed: its times are set
        once its last file is written (each new entry sets its mtime to now)."""
        frame.left = True
        source.close(frame.src_fd)  # listed and judged: only the copy side is left to write
        frame.src_fd = -1
        if frame.pending:
            self._waiting.append(frame)
        else:
            self._finish(frame)

    def _finish(self, frame: SyncDir[H]) -> None:
        try:
            self.side.set_dir_times(frame.handle, *frame.times)
        finally:
            self.side.close(frame.handle)

    def _drain(self) -> None:
        """Wait for every file handed out (the walk's end: the root's times wait for it)."""
        while self._pool is not None and self._pool.inflight:
            self._settle(True)

    def _stop(self, stack: list[SyncDir[H]]) -> None:
        """After the walk, however it ended: stop the workers (a failed walk's jobs not started
        are cancelled; none writes after this), then close every directory still open."""
        if self._pool is not None:
            self._pool.shutdown()
        for frame in (*stack, *self._waiting):
            self.side.close(frame.handle)
            source.close(frame.src_fd)
        self._waiting.clear()
