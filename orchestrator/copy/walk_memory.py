"""The resync given a memory of the copy's side (design §5.1; copy/memory.py says what it holds
and when it may be trusted): the source side exactly as copy/walk.py walks it (held directory
fds, lstat per entry, links, the guard, excludes, bounds), the copy side of a remembered
directory not opened at all.

In a remembered directory a source file is settled by one packed comparison: its (size,
mtime_ns, ctime_ns, inode, device, kind and bits) equal to the source half of a record entry
the racy-clean rule vouched for, so the whole entry -- the copy half too, which nothing wrote
since (the memory's safeguards) -- is carried into the new record. A remembered subdirectory
is entered by its source side alone when its bits are the remembered ones. Anything else (a
changed file, a link, a new or racy entry, a directory whose times must be set, an extra to
remove) gets copy/walk.py's per-entry treatment, the copy directory opened then, checked to be
the remembered inode with the remembered listing: a copy that is not as remembered raises
:class:`MemoryWrong`, and the caller runs today's walk from the start (it is exact from any
state the copy is in).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from sprawl_orch.copy import source
from sprawl_orch.copy.memory import SOURCE_HALF, CopyMemory, DirMemory, Vouched
from sprawl_orch.copy.side import PROGRESS_EVERY
from sprawl_orch.copy.source import SourceChanged
from sprawl_orch.copy.walk import Walk
from sprawl_orch.copy.walk_state import SyncDir

_KIND_AND_RWX = stat.S_IFMT(0o177777) | 0o777


class MemoryWrong(Exception):
    """The copy was not as the memory says: run today's walk from the start."""


@dataclass(eq=False)
class MemDir(SyncDir[int]):
    mem: DirMemory | None = None
    opened: bool = True  # handle is an open copy directory (else -1: not opened yet)
    hit: list[Vouched] = field(default_factory=list)  # settled, not yet counted (_carry)
    all_hit: bool = True  # every file hit so far was carried whole


class MemoryWalk(Walk[int]):
    """One sync pass over FdCopy with a memory (the module docstring)."""

    memory: CopyMemory

    def run(self, root: int) -> None:
        assert self.before is None and self.touched is None  # never a workspace's base
        mem, side = self.memory, self.side
        stack: list[SyncDir[int]] = []
        self._stack = stack
        try:
            if (os.fstat(root).st_dev, os.fstat(root).st_ino) != mem.root:
                raise MemoryWrong("the copy root is another directory")
            src_fd, st = source.open_top(self.source)
            first = MemDir(
                self.source, "", True, root, 0, (st.st_dev, st.st_ino), [], {},
                (st.st_atime_ns, st.st_mtime_ns), src_fd, mem.dirs.get(""),
            )  # fmt: skip
            stack.append(first)
            first.entries = source.listing(src_fd, self.source)
            first.it = iter(first.entries)
            first.copy = dict(first.mem.kinds) if first.mem is not None else side.kinds(root)
            self._ancestors.add(first.ident)
            self._ctimes[""] = first.ctimes
        except BaseException:
            side.close(root)
            for frame in stack:
                source.close(frame.src_fd)
            raise
        half, max_depth = SOURCE_HALF.pack, self.bounds.depth
        remembered = mem.dirs
        quick_ok = not self.excludes
        try:
            while stack:
                top = stack[-1]
                child: SyncDir[int] | None = None
                dm = top.mem if isinstance(top, MemDir) else None
                files = dm.files if dm is not None and quick_ok and top.depth < max_depth else {}
                hit = top.hit if isinstance(top, MemDir) else []
                copy = top.copy
                prefix = top.rel + os.sep if top.rel else ""
                for entry in top.it:
                    self.walked += 1
                    name = entry.name
                    got = files.get(name)
                    if got is not None and not entry.is_symlink():
                        st = entry.stat()  # not a link: its own lstat
                        if (
                            half(
                                st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev,
                                st.st_mode & _KIND_AND_RWX,
                            ) == got[0]
                        ):  # fmt: skip
                            # Equal to a vouched entry: settled. Counted, bounded and
                            # recorded with the directory's other ones (_carry).
                            del copy[name]
                            hit.append(got)
                            continue
                    elif quick_ok and copy.get(name) == "dir" and top.real:
                        child = self._remembered_dir(top, entry, prefix + name, remembered)
                        if child is not None:
                            break
                    self._open(top)
                    self._carry(top)  # the bounds as counted so far, for the per-entry path
                    child = self._entry(top, entry)
                    if child is not None:
                        break
                if child is not None:
                    stack.append(child)
                    self._ancestors.add(child.ident)
                    self._ctimes[child.rel] = child.ctimes
                    continue
                self._carry(top)
                if top.copy:
                    self._open(top)
                for name, kind in top.copy.items():
                    self.dirty = True
                    self.removed += side.remove(name, top.handle, kind)
                self._ancestors.discard(top.ident)
                if isinstance(top, MemDir) and not top.opened:
                    if top.mem is not None and top.times[1] == top.mem.mtime_ns:
                        top.left = True  # nothing written, its times are the source's
                        source.close(top.src_fd)
                        top.src_fd = -1
                        stack.pop()
                        continue
                    self._open(top)
                self._leave(stack.pop())
            self._drain()
        finally:
            self._stop_all(stack)

    def _carry(self, frame: SyncDir[int]) -> None:
        """Count, bound and record the files settled in ``frame`` since the last carry: the
        directory's whole remembered entries in one go when every vouched file was settled."""
        if not isinstance(frame, MemDir) or not frame.hit:
            return
        hit, dm = frame.hit, frame.mem
        assert dm is not None
        if frame.all_hit and len(hit) == len(dm.files):
            self.new.paths.extend(dm.rels)
            self._entries += dm.blob
            frame.ctimes.update(dm.ctimes)
            size = dm.size
        else:
            size = 0
            for got in hit:
                self._add_path(got[3])
                self._entries += got[1]
                frame.ctimes[got[3].rpartition(os.sep)[2]] = got[2]
                size += got[4]
        frame.all_hit = False
        before = self.files
        self.files += len(hit)
        self.bytes += size
        hit.clear()
        if self.files > self.bounds.files or self.bytes > self.bounds.bytes:
            self.files -= 1
            self._count(0)  # raises the refusal, as copy/walk.py's _file does
        if self.progress is not None and before // PROGRESS_EVERY != self.files // PROGRESS_EVERY:
            self.progress(self.files, self.bytes, False)

    def _remembered_dir(
        self,
        parent: SyncDir[int],
        entry: os.DirEntry[str],
        rel: str,
        remembered: dict[str, DirMemory],
    ) -> MemDir | None:
        """A source directory entered without opening its copy: it is remembered (its ctime did
        not move), has the bits the source wants, and is no loop; None: the full path decides."""
        sub = remembered.get(rel)
        if sub is None or entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            return None
        level = parent.depth + 1
        st = entry.stat(follow_symlinks=False)
        ident = (st.st_dev, st.st_ino)
        want = stat.S_IMODE(st.st_mode) & 0o777 | 0o700
        if level > self.bounds.depth or want != sub.mode or ident in self._ancestors:
            return None
        path = os.path.join(parent.src, entry.name)
        try:
            src_fd = source.open_in(parent.src_fd, entry.name, path, st, source.DIR_FLAGS)[0]
        except SourceChanged:
            return None  # judged afresh by the full path
        try:
            entries = source.listing(src_fd, path)
        except BaseException:
            source.close(src_fd)
            raise
        del parent.copy[entry.name]
        self.new.dirs.append(rel)
        return MemDir(
            path, rel, True, -1, level, ident, entries, dict(sub.kinds),
            (st.st_atime_ns, st.st_mtime_ns), src_fd, sub, False,
        )  # fmt: skip

    def _open(self, frame: SyncDir[int]) -> None:
        """Open a remembered copy directory (and any unopened ancestor) for the per-entry
        treatment; MemoryWrong if it is not the remembered inode with the remembered listing."""
        if not isinstance(frame, MemDir) or frame.opened:
            return
        stack = self._stack
        at = next((i for i, f in enumerate(stack) if f is frame), len(stack))
        chain = [*stack[:at], frame]
        for i, here in enumerate(chain):
            if not isinstance(here, MemDir) or here.opened:
                continue
            assert here.mem is not None
            handle = self.side.open_dir(os.path.basename(here.rel), chain[i - 1].handle)
            here.handle, here.opened = handle, True
            if (
                os.fstat(handle).st_ino != here.mem.ident
                or self.side.kinds(handle) != here.mem.kinds
            ):
                raise MemoryWrong(f"{here.rel}: the copy directory is not as remembered")

    def _stop_all(self, stack: list[SyncDir[int]]) -> None:
        """Walk._stop, but a copy directory never opened is not closed."""
        if self._pool is not None:
            self._pool.shutdown()
        for frame in (*stack, *self._waiting):
            if not isinstance(frame, MemDir) or frame.opened:
                self.side.close(frame.handle)
            source.close(frame.src_fd)
        self._waiting.clear()


def memory_walk(memory: CopyMemory, *args: object, **kwargs: object) -> MemoryWalk:
    walk = MemoryWalk(*args, **kwargs)  # type: ignore[arg-type]
    walk.memory = memory
    return walk
