"""One sync pass over the source and the copy (copy_sync's walk; the rules are in its docstring).

Depth-first with an explicit stack: only the ancestors' copy directories are open. Each
regular file is settled by, in order: the stamp record (copy_stamps: the racy-clean rule),
then a byte comparison, then a fresh copy. Every settled file, link and directory goes into
the new record, which the caller saves once the whole pass succeeded.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import pydantic

from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.bounds import RECOVERY, Bounds, Excludes, bound_key, human, largest_entries
from sprawl_orch.copy.fileops import BudgetExceeded, FdCopy, Kind, SourceUnreadable
from sprawl_orch.copy.links import kernel_state, stays_inside
from sprawl_orch.copy.stamps import ENTRY, SyncRecord
from sprawl_orch.core import fs_clock
from sprawl_orch.core.credential_places import Guard, copy_refusal
from sprawl_orch.core.errors import CopyBoundError, ErrorCode

# Links are kept as links where the copy side can make them; Windows needs a privilege for it.
LINKS_KEPT = os.name != "nt"
# A link that cannot be resolved: ENOENT dangling, ELOOP pointing at itself, ENOTDIR through a file.
_UNRESOLVED = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)
_KIND_AND_BITS = stat.S_IFMT(0o177777) | 0o7777
ENTRY_SIZE = ENTRY.size
PROGRESS_EVERY = 512  # files between two progress reports
SKIPPED_NAMED = 100  # a tree of many fifos must not make every result that long
Progress = Callable[[int, int, bool], None]
"""Told (files, bytes, done) counted so far: every PROGRESS_EVERY files of a sync with
``done=False``, and once with ``done=True`` when the sync ends, however it ends."""


class FileWork(pydantic.BaseModel, frozen=True):
    """What one sync did (copy_sync's docstring says exactly what each count counts) and the
    ``[sandbox.copy] exclude`` patterns it left out, named in every result."""

    created: int
    rewritten: int
    removed: int
    walked: int
    excluded: tuple[str, ...] = ()
    # Entries reached through a link out of the tree that were left out, each "path: why"
    # (core.credential_places.copy_refusal: credentials, homes, runtime or state places).
    refused_links: tuple[str, ...] = ()
    # Entries the copy does not hold, each "path: why": fifos, sockets, devices and links that
    # lead nowhere (issue 27: a fifo used to be skipped without a word). At most SKIPPED_NAMED,
    # then one "… and N more".
    skipped: tuple[str, ...] = ()


H = TypeVar("H")


class CopySide(Protocol[H]):
    """Every operation of a sync on the copy side; ``H`` is an open copy directory. Entries are
    never followed: ``Kind`` is what the entry itself is (copy_fileops.Kind)."""

    def open_parent(self, path: str) -> H: ...
    def open_root(self, name: str, parent: H) -> H: ...
    def close(self, handle: H) -> None: ...
    def kinds(self, handle: H) -> dict[str, Kind]: ...
    def lookup(self, name: str, parent: H) -> Kind | None: ...
    def lstat(self, name: str, parent: H) -> os.stat_result | None: ...
    def remove(self, name: str, parent: H, kind: Kind) -> int: ...
    def mkdir(self, name: str, parent: H) -> None: ...
    def open_dir(self, name: str, parent: H) -> H: ...
    def set_dir_mode(self, handle: H, mode: int) -> None: ...
    def set_dir_times(self, handle: H, atime_ns: int, mtime_ns: int) -> None: ...
    def set_link_times(self, name: str, parent: H, atime_ns: int, mtime_ns: int) -> None: ...
    def readlink(self, name: str, parent: H) -> str | None: ...
    def symlink(self, target: str, name: str, parent: H) -> None: ...
    def same_bytes(self, src_path: str, name: str, parent: H, size: int, mode: int) -> bool: ...
    def copy_file(
        self, src_path: str, name: str, parent: H, mode: int, budget: int
    ) -> tuple[int, os.stat_result]: ...


@dataclass
class _Dir(Generic[H]):
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

    def __post_init__(self) -> None:
        self.it = iter(self.entries)
        self.ctimes: dict[str, int] = {}  # of the copy files settled here


def list_source(src: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(src) as it:
            return list(it)
    except OSError as err:
        raise SourceUnreadable(src, err) from err


@dataclass
class Walk(Generic[H]):
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

    def skip(self, rel: str, why: str) -> None:
        if len(self.skipped) < SKIPPED_NAMED:
            self.skipped.append(f"{rel}: {why}")
        else:
            self.skipped_more += 1

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
        """E_COPY_BOUND; `bound` ("files", "bytes", "depth") and the count `reached` go into
        its fields, the limit read from this walk's bounds."""
        top = largest_entries(self.source, self.excludes)
        if top:
            detail += f"; largest top-level entries: {top}"
        b = self.bounds
        limits = {"files": b.files, "bytes": b.bytes, "depth": b.depth}
        return CopyBoundError(
            ErrorCode.COPY_BOUND,
            self.subject,
            detail,
            recovery or RECOVERY.format(key=key.replace(" = ", " (now ") + ")"),
            bound=bound,
            limit=None if bound is None else limits[bound],
            reached=reached,
        )

    def refuse_depth(self, rel: str, level: int, why: str) -> CopyBoundError:
        rel = rel if len(rel) <= 160 else rel[:160] + "…"  # a link loop repeats itself
        key = bound_key("depth", self.bounds.depth)
        detail = f"{why}: {rel} is at level {level} (bound {key})"
        return self.refuse(detail, key, bound="depth", reached=level)

    def run(self, root: H) -> None:
        """Sync the source into the open copy root; closes ``root``."""
        side = self.side
        stack: list[_Dir[H]] = []
        try:
            st = os.stat(self.source)
            top = _Dir(
                self.source,
                "",
                True,
                root,
                0,
                (st.st_dev, st.st_ino),
                list_source(self.source),
                side.kinds(root),
                (st.st_atime_ns, st.st_mtime_ns),
            )
            stack.append(top)
            self._ancestors.add(top.ident)
            self._ctimes[""] = top.ctimes
        except BaseException:
            side.close(root)
            raise
        # The fast path's lookups, hoisted out of the loop (it runs once per file).
        offsets, old_entries = self._offsets, self._old_entries
        edge, timed = self._edge, self._timed
        lstat, pack, add_path, buf = self._lstat, self._pack, self._add_path, self._entries
        max_files, max_bytes = self.bounds.files, self.bounds.bytes
        try:
            while stack:
                top = stack[-1]
                child = None
                quick = self._quick_ok and top.depth < self.bounds.depth
                copy, handle, here = top.copy, top.handle, top.ctimes
                prefix = top.rel + os.sep if top.rel else ""
                for entry in top.it:
                    self.walked += 1
                    # The hot path of a no-change resync, inlined (it is most of the time of
                    # a resync): a plain file the stamp record vouches for by the racy-clean
                    # rule, within the bounds. Anything else takes the full path (_entry).
                    name = entry.name
                    if quick and copy.get(name) == "file" and not entry.is_symlink():
                        st = entry.stat()
                        rel = prefix + name
                        at = offsets.get(rel)
                        if at is not None and stat.S_ISREG(st.st_mode):
                            try:  # handle is a directory fd: _quick_ok checked FdCopy
                                cst = lstat(
                                    name,
                                    dir_fd=handle,  # type: ignore[arg-type]
                                    follow_symlinks=False,
                                )
                            except OSError:
                                cst = None  # gone or unreadable: the full path decides
                            if (
                                cst is not None
                                and old_entries[at : at + ENTRY_SIZE]
                                == (packed := pack(st, cst, st.st_mode & 0o777))
                                and cst.st_mode & _KIND_AND_BITS
                                == stat.S_IFREG | st.st_mode & 0o777
                                and cst.st_mtime_ns == st.st_mtime_ns
                                and max(
                                    st.st_mtime_ns, st.st_ctime_ns, cst.st_mtime_ns, cst.st_ctime_ns
                                )
                                < edge
                                and (st.st_dev in timed or self._learn(st.st_dev))
                                and (cst.st_dev in timed or self._learn(cst.st_dev))
                                and self.files < max_files
                                and self.bytes + st.st_size <= max_bytes
                            ):
                                del copy[name]
                                here[name] = cst.st_ctime_ns
                                add_path(rel)
                                buf += packed
                                self.files += 1
                                self.bytes += st.st_size
                                if self.progress is not None and not self.files % PROGRESS_EVERY:
                                    self.progress(self.files, self.bytes, False)
                                continue
                    child = self._entry(top, entry)
                    if child is not None:
                        break
                if child is not None:
                    stack.append(child)
                    self._ancestors.add(child.ident)
                    self._ctimes[child.rel] = child.ctimes
                    continue
                for name, kind in top.copy.items():
                    self.dirty = True
                    if self.before is not None:
                        self.before(top.rel + os.sep + name if top.rel else name, False)
                    self.removed += side.remove(name, top.handle, kind)
                    if self.touched is not None:
                        self.touched.append(top.rel + os.sep + name if top.rel else name)
                # After its last entry was written or removed (each of those sets it to now).
                side.set_dir_times(top.handle, *top.times)
                self._ancestors.discard(top.ident)
                side.close(stack.pop().handle)
        finally:
            for frame in stack:
                side.close(frame.handle)

    def _entry(self, parent: _Dir[H], entry: os.DirEntry[str]) -> _Dir[H] | None:
        rel = parent.rel + os.sep + entry.name if parent.rel else entry.name
        if self.excludes and self.excludes.match(rel, entry.is_dir()):
            return None  # left out: whatever the copy holds there is deleted as an extra
        level = parent.depth + 1
        if level > self.bounds.depth:
            raise self.refuse_depth(
                rel, level, f"the tree is deeper than {self.bounds.depth} levels"
            )
        is_link = entry.is_symlink()
        if is_link and parent.real and LINKS_KEPT:
            try:
                target = os.readlink(entry.path)
            except OSError as err:
                raise SourceUnreadable(entry.path, err) from err
            where = tuple(parent.rel.split(os.sep)) if parent.rel else ()
            if stays_inside(self.source, where, target):
                try:
                    lst = entry.stat(follow_symlinks=False)
                except OSError as err:
                    raise SourceUnreadable(entry.path, err) from err
                self._link(parent, entry.name, rel, target, (lst.st_atime_ns, lst.st_mtime_ns))
                return None
        try:
            st = entry.stat()  # follows links: the content rule
        except OSError as err:
            if err.errno in _UNRESOLVED and (is_link or err.errno == errno.ENOENT):
                if is_link:
                    self.skip(rel, f"a symbolic link that leads nowhere ({os.strerror(err.errno)})")
                return None  # dangling or self-referencing link, or gone since listed
            raise SourceUnreadable(entry.path, err) from err
        if (is_link or not parent.real) and kernel_state(entry.path, st):
            # copy.links.kernel_state: never the sync's own /proc/self/environ
            self.skip(rel, "leads to kernel state of the process that syncs (/proc)")
            return None
        if self.guard is not None and (is_link or not parent.real):
            why = copy_refusal(self.guard, entry.path, st)
            if why is not None:
                self.refused.append(f"{rel}: {why}")
                return None  # left out: whatever the copy held there goes as an extra
        if stat.S_ISDIR(st.st_mode):
            if (st.st_dev, st.st_ino) in self._ancestors:
                key = bound_key("depth", self.bounds.depth)
                raise self.refuse(
                    f"{rel} is a symbolic link to a directory that contains it (found by the "
                    "loop check): copying what it points at would never end",
                    key,
                    f"add {rel!r} to [sandbox.copy] exclude, or remove the link",
                )
            return self._dir(parent, entry, st, rel, parent.real and not is_link)
        if stat.S_ISREG(st.st_mode):
            self._file(parent, entry, st, rel)
        else:
            self.skip(rel, _special(st.st_mode))
        return None

    def _dir(
        self, parent: _Dir[H], entry: os.DirEntry[str], st: os.stat_result, rel: str, real: bool
    ) -> _Dir[H]:
        side = self.side
        want = stat.S_IMODE(st.st_mode) & 0o777 | 0o700
        entries = list_source(entry.path)
        old = parent.copy.pop(entry.name, None)
        if old != "dir" and self.before is not None:
            self.before(rel, False)
        if old is not None and old != "dir":
            self.removed += side.remove(entry.name, parent.handle, old)
            old = None
        if old is None:
            self.dirty = True
            side.mkdir(entry.name, parent.handle)
            if self.touched is not None:
                self.touched.append(rel)
        handle = side.open_dir(entry.name, parent.handle)
        try:
            if old is not None and self.before is not None:
                # int: FdCopy's directory fd; str: PathCopy's lstat-checked path
                now = os.fstat(handle) if isinstance(handle, int) else os.lstat(str(handle))
                if stat.S_IMODE(now.st_mode) != want:
                    self.before(rel, True)
            side.set_dir_mode(handle, want)
            copy = side.kinds(handle) if old is not None else {}
        except BaseException:
            side.close(handle)
            raise
        self.new.dirs.append(rel)
        return _Dir(
            entry.path,
            rel,
            real,
            handle,
            parent.depth + 1,
            (st.st_dev, st.st_ino),
            entries,
            copy,
            (st.st_atime_ns, st.st_mtime_ns),
        )

    def _count(self, size: int) -> None:
        bounds = self.bounds
        self.files += 1
        if self.files > bounds.files:
            key = bound_key("files", bounds.files)
            raise self.refuse(
                f"the tree has more than {bounds.files:,} files: {self.files:,} "
                f"reached, with {human(self.bytes)} in them (bound {key})",
                key,
                bound="files",
                reached=self.files,
            )
        if self.bytes + size > bounds.bytes:
            raise self._over_bytes(self.bytes + size)
        if self.progress is not None and self.files % PROGRESS_EVERY == 0:
            self.progress(self.files, self.bytes, False)

    def _over_bytes(self, reached: int) -> CopyBoundError:
        bound, key = self.bounds.bytes, bound_key("bytes", self.bounds.bytes)
        return self.refuse(
            f"the tree holds more than {bound:,} bytes ({human(bound)}): "
            f"{reached:,} reached after {self.files:,} files (bound {key})",
            key,
            bound="bytes",
            reached=reached,
        )

    def _learn(self, dev: int) -> bool:
        """Whether the racy-clean rule may trust stamps on ``dev`` (looked up once)."""
        if dev not in self._untimed and fs_clock.granularity_ns(dev) is not None:
            self._timed.add(dev)
            return True
        self._untimed.add(dev)
        return False

    def _file(self, parent: _Dir[H], entry: os.DirEntry[str], st: os.stat_result, rel: str) -> None:
        # The hot path of a resync: bounds, then the racy-clean rule (copy_stamps) inlined.
        size = st.st_size
        self.files += 1
        if self.files > self.bounds.files or self.bytes + size > self.bounds.bytes:
            self.files -= 1
            self._count(size)  # raises the refusal
        if self.progress is not None and self.files % PROGRESS_EVERY == 0:
            self.progress(self.files, self.bytes, False)
        mode = st.st_mode & 0o777
        name, side, handle = entry.name, self.side, parent.handle
        if st.st_ctime_ns >= self._line:
            self.new.recent.append(rel)
        old = parent.copy.pop(name, None)
        fresh = True
        if old == "file":
            cst = side.lstat(name, handle)
            # A regular file of the same size, exactly the wanted bits (set-id bits a
            # command added make it differ) and the source's mtime (else it is copied
            # afresh: a .pyc or make target checks the mtime, not the bytes).
            if (
                cst is not None
                and cst.st_size == size
                and cst.st_mode & _KIND_AND_BITS == (stat.S_IFREG | mode)
                and cst.st_mtime_ns == st.st_mtime_ns
            ):
                packed = self._pack(st, cst, mode)
                at = self._offsets.get(rel)
                vouched = (
                    at is not None
                    and copy_stamps.newest(st, cst) < self._edge
                    and self._old_entries[at : at + ENTRY_SIZE] == packed
                    and (st.st_dev in self._timed or self._learn(st.st_dev))
                    and (cst.st_dev in self._timed or self._learn(cst.st_dev))
                )
                self.dirty |= not vouched  # a new stamp to record, with this sync's start
                if vouched or side.same_bytes(entry.path, name, handle, size, mode):
                    parent.ctimes[name] = cst.st_ctime_ns
                    self._add_path(rel)
                    self._entries += packed
                    self.bytes += size
                    return
        self.dirty = True
        if self.before is not None:
            self.before(rel, False)
        if old == "dir":
            self.removed += side.remove(name, handle, old)
        elif old is not None:
            side.remove(name, handle, old)
            fresh = False
        try:
            budget = self.bounds.bytes - self.bytes
            size, cst = side.copy_file(entry.path, name, handle, mode, budget)
        except BudgetExceeded:
            raise self._over_bytes(self.bounds.bytes + 1) from None
        self.bytes += size
        parent.ctimes[name] = cst.st_ctime_ns
        self._add_path(rel)
        self._entries += self._pack(st, cst, mode)
        self._counted(fresh)
        if self.touched is not None:
            self.touched.append(rel)

    def _link(
        self, parent: _Dir[H], name: str, rel: str, target: str, times: tuple[int, int]
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

    def _counted(self, fresh: bool) -> None:
        self.created += fresh
        self.rewritten += not fresh


def _special(mode: int) -> str:
    """Why an entry that is neither a file nor a directory is not copied."""
    what = (
        "a fifo (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISBLK(mode) or stat.S_ISCHR(mode)
        else "not a file, directory or link"
    )
    # Its content exists only while a process serves it: there is nothing to copy.
    return f"{what}: only files, directories and links are copied"
