"""One sync pass over the source and the copy (copy_sync's walk; the rules are in its docstring).

Depth-first with an explicit stack: only the ancestors' copy directories are open. Each
regular file is settled by, in order: the stamp record (copy_stamps: the racy-clean rule),
then a byte comparison, then a fresh copy. Every settled file, link and directory goes into
the new record, which the caller saves once the whole pass succeeded.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from sprawl_orch.copy import source
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
    special_why,
)
from sprawl_orch.copy.source import Reached, SourceChanged, SourceFile
from sprawl_orch.copy.walk_state import ENTRY_SIZE, KIND_AND_BITS, H, SyncDir, WalkState
from sprawl_orch.core.credential_places import copy_refusal

__all__ = ["CopySide", "FileWork", "Progress", "Walk"]

# A link that cannot be resolved: ENOENT dangling, ELOOP pointing at itself, ENOTDIR through a file.
_UNRESOLVED = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)
JUDGE_TRIES = 3  # a source entry that changed while it was judged: judged this often
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
            src_fd, st = source.open_top(self.source)
            stack.append(
                SyncDir(
                    self.source,
                    "",
                    True,
                    root,
                    0,
                    (st.st_dev, st.st_ino),
                    [],
                    {},
                    (st.st_atime_ns, st.st_mtime_ns),
                    src_fd,
                )
            )
            top = stack[-1]
            top.entries = source.listing(src_fd, self.source)
            top.it = iter(top.entries)
            top.copy = side.kinds(root)
            self._ancestors.add(top.ident)
            self._ctimes[""] = top.ctimes
        except BaseException:
            side.close(root)
            for frame in stack:
                source.close(frame.src_fd)
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
                    if self.before is not None:
                        self.before(top.rel + os.sep + name if top.rel else name, False)
                    self.removed += side.remove(name, top.handle, kind)
                    if self.touched is not None:
                        self.touched.append(top.rel + os.sep + name if top.rel else name)
                self._ancestors.discard(top.ident)
                # Its times are set after its last entry was written or removed (each of
                # those sets them to now): now, or when its last copy worker is settled.
                self._leave(stack.pop())
            self._drain()
        finally:
            self._stop(stack)

    def _entry(self, parent: SyncDir[H], entry: os.DirEntry[str]) -> SyncDir[H] | None:
        rel = parent.rel + os.sep + entry.name if parent.rel else entry.name
        if self.excludes and self.excludes.match(rel, entry.is_dir()):
            return None  # left out: whatever the copy holds there is deleted as an extra
        level = parent.depth + 1
        if level > self.bounds.depth:
            raise self.refuse_depth(
                rel, level, f"the tree is deeper than {self.bounds.depth} levels"
            )
        # A source entry that changed between being judged and being opened (copy/source.py)
        # is judged afresh: an editor's save by rename is no attack. One that keeps changing
        # is left out and named.
        for _ in range(JUDGE_TRIES - 1):
            with contextlib.suppress(SourceChanged):
                return self._judge(parent, entry, rel)
        try:
            return self._judge(parent, entry, rel)
        except SourceChanged as err:
            self.refused.append(f"{rel}: {err.why}")
            return None

    def _judge(self, parent: SyncDir[H], entry: os.DirEntry[str], rel: str) -> SyncDir[H] | None:
        name, path, fd = entry.name, os.path.join(parent.src, entry.name), parent.src_fd
        try:
            # Not followed, relative to the held directory (copy/source.py); an entry swapped
            # for a link since it was listed is judged as the link it now is.
            lst = source.lstat(fd, name, path)
        except OSError as err:
            if err.errno == errno.ENOENT:
                return None  # gone since listed
            raise SourceUnreadable(path, err) from err
        is_link = stat.S_ISLNK(lst.st_mode)
        if is_link and parent.real and LINKS_KEPT:
            try:
                target = source.readlink(fd, name, path)
            except OSError as err:
                if err.errno in (errno.EINVAL, errno.ENOENT):  # no longer a link, or gone
                    raise SourceChanged(path, "it was no longer a link") from None
                raise SourceUnreadable(path, err) from err
            where = tuple(parent.rel.split(os.sep)) if parent.rel else ()
            if stays_inside(self.source, where, target):
                self._link(parent, name, rel, target, (lst.st_atime_ns, lst.st_mtime_ns))
                return None
        reached = None
        try:
            if is_link or not parent.real:
                reached = self._reach(parent, name, path, rel, is_link)
                if reached is None:
                    return None
                st = reached.st
            else:
                st = lst
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in self._ancestors:
                    key = bound_key("depth", self.bounds.depth)
                    raise self.refuse(
                        f"{rel} is a symbolic link to a directory that contains it (found by "
                        "the loop check): copying what it points at would never end",
                        key,
                        f"add {rel!r} to [sandbox.copy] exclude, or remove the link",
                    )
                return self._dir(parent, name, path, st, rel, reached)
            if stat.S_ISREG(st.st_mode):
                self._file(parent, SourceFile(path, st, fd, name, reached), rel)
            else:
                self.skip(rel, special_why(st.st_mode))
        finally:
            if reached is not None:
                reached.close()
        return None

    def _reach(
        self, parent: SyncDir[H], name: str, path: str, rel: str, is_link: bool
    ) -> Reached | None:
        """Follow a link (or an entry below a followed one) and judge what it reached, held
        open (copy/source.py); None when it is left out, named."""
        try:
            reached = source.follow(parent.src_fd, name, path)
        except OSError as err:
            if err.errno in _UNRESOLVED and (is_link or err.errno == errno.ENOENT):
                if is_link:
                    self.skip(rel, f"a symbolic link that leads nowhere ({os.strerror(err.errno)})")
                return None  # dangling or self-referencing link, or gone since listed
            raise SourceUnreadable(path, err) from err
        try:
            if kernel_state(reached.real, reached.st):
                # copy.links.kernel_state: never the sync's own /proc/self/environ
                self.skip(rel, "leads to kernel state of the process that syncs (/proc)")
                reached.close()
                return None
            if self.guard is not None:
                why = copy_refusal(self.guard, reached.real, reached.st, resolved=True)
                if why is not None:
                    self.refused.append(f"{rel}: {why}")
                    reached.close()
                    return None  # left out: whatever the copy held there goes as an extra
        except BaseException:
            reached.close()
            raise
        return reached

    def _dir(
        self,
        parent: SyncDir[H],
        name: str,
        path: str,
        st: os.stat_result,
        rel: str,
        reached: Reached | None,
    ) -> SyncDir[H]:
        side = self.side
        want = stat.S_IMODE(st.st_mode) & 0o777 | 0o700
        # The source directory opened (and checked to be the one judged) before the copy
        # is touched: a swap leaves the copy's old entry to go as an extra.
        if reached is not None:
            src_fd = reached.reopen(source.DIR_FLAGS)[0]
        elif parent.src_fd >= 0:
            src_fd = source.open_in(parent.src_fd, name, path, st, source.DIR_FLAGS)[0]
        else:
            src_fd = -1
        try:
            entries = source.listing(src_fd, path)
            old = parent.copy.pop(name, None)
            if old != "dir" and self.before is not None:
                self.before(rel, False)
            if old is not None and old != "dir":
                self.removed += side.remove(name, parent.handle, old)
                old = None
            if old is None:
                self.dirty = True
                side.mkdir(name, parent.handle)
                if self.touched is not None:
                    self.touched.append(rel)
            handle = side.open_dir(name, parent.handle)
        except BaseException:
            source.close(src_fd)
            raise
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
            source.close(src_fd)
            raise
        self.new.dirs.append(rel)
        return SyncDir(
            path,
            rel,
            parent.real and reached is None,
            handle,
            parent.depth + 1,
            (st.st_dev, st.st_ino),
            entries,
            copy,
            (st.st_atime_ns, st.st_mtime_ns),
            src_fd,
        )

    def _file(self, parent: SyncDir[H], src: SourceFile, rel: str) -> None:
        # The hot path of a resync: bounds, then the racy-clean rule (copy_stamps) inlined.
        st = src.st
        size = st.st_size
        self.files += 1
        if self.files > self.bounds.files or self.bytes + size > self.bounds.bytes:
            self.files -= 1
            self._count(size)  # raises the refusal
        if self.progress is not None and self.files % PROGRESS_EVERY == 0:
            self.progress(self.files, self.bytes, False)
        mode = st.st_mode & 0o777
        name, side, handle = os.path.basename(src.path), self.side, parent.handle
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
                try:
                    same = vouched or side.same_bytes(src, name, handle, size, mode)
                except SourceChanged:
                    parent.copy[name] = old  # untouched: judged afresh (_entry)
                    self._uncount(rel)
                    raise
                if same:
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
            if self._pool is not None:  # a copy worker writes it (copy/pool.py)
                self._hand_out(parent, src, name, rel, mode)
            else:
                budget = self.bounds.bytes - self.bytes
                size, cst = side.copy_file(src, name, handle, mode, budget)
                self.bytes += size
                parent.ctimes[name] = cst.st_ctime_ns
                self._add_path(rel)
                self._entries += self._pack(st, cst, mode)
        except BudgetExceeded:
            raise self._over_bytes(self.bounds.bytes + 1) from None
        except SourceChanged:
            self._uncount(rel)  # nothing was created: judged afresh (_entry)
            raise
        self._counted(fresh)
        if self.touched is not None:
            self.touched.append(rel)
