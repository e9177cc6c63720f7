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

from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.bounds import bound_key
from sprawl_orch.copy.fileops import BudgetExceeded, SourceUnreadable
from sprawl_orch.copy.links import kernel_state, stays_inside
from sprawl_orch.copy.side import (
    LINKS_KEPT,
    PROGRESS_EVERY,
    CopySide,
    FileWork,
    Progress,
    list_source,
    special_why,
)
from sprawl_orch.copy.walk_state import ENTRY_SIZE, KIND_AND_BITS, H, SyncDir, WalkState
from sprawl_orch.core.credential_places import copy_refusal

__all__ = ["CopySide", "FileWork", "Progress", "Walk"]

# A link that cannot be resolved: ENOENT dangling, ELOOP pointing at itself, ENOTDIR through a file.
_UNRESOLVED = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)
SKIPPED_NAMED = 100  # a tree of many fifos must not make every result that long


class Walk(WalkState[H]):
    """One sync pass (the module docstring); its state and counts are WalkState's."""

    def skip(self, rel: str, why: str) -> None:
        if len(self.skipped) < SKIPPED_NAMED:
            self.skipped.append(f"{rel}: {why}")
        else:
            self.skipped_more += 1

    def run(self, root: H) -> None:
        """Sync the source into the open copy root; closes ``root``."""
        side = self.side
        stack: list[SyncDir[H]] = []
        try:
            st = os.stat(self.source)
            top = SyncDir(
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
                                and cst.st_mode & KIND_AND_BITS == stat.S_IFREG | st.st_mode & 0o777
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

    def _entry(self, parent: SyncDir[H], entry: os.DirEntry[str]) -> SyncDir[H] | None:
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
            self.skip(rel, special_why(st.st_mode))
        return None

    def _dir(
        self, parent: SyncDir[H], entry: os.DirEntry[str], st: os.stat_result, rel: str, real: bool
    ) -> SyncDir[H]:
        side = self.side
        want = stat.S_IMODE(st.st_mode) & 0o777 | 0o700
        entries = list_source(entry.path)
        old = parent.copy.pop(entry.name, None)
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
            side.set_dir_mode(handle, want)
            copy = side.kinds(handle) if old is not None else {}
        except BaseException:
            side.close(handle)
            raise
        self.new.dirs.append(rel)
        return SyncDir(
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

    def _file(
        self, parent: SyncDir[H], entry: os.DirEntry[str], st: os.stat_result, rel: str
    ) -> None:
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
                and cst.st_mode & KIND_AND_BITS == (stat.S_IFREG | mode)
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
