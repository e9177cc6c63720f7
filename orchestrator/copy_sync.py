"""The synced copy (SPEC §5): make a private copy equal to the working directory, file by file.

Sandbox arms run each command in a copy that is kept between commands and synced to the
working directory as it is now before each one:

- the source side follows symbolic links: a link out of the tree brings the content it points
  at, never a link back into the person's tree. A dangling link (or a link that points at
  itself) is copied as nothing; fifos, sockets and devices are skipped. Whatever the copy holds
  under a skipped name is deleted like any other extra;
- the copy side never follows links (the previous command wrote it, see copy_fileops);
- an item of a different kind, or a regular file whose bytes or permission bits differ, is
  deleted and copied afresh as a new directory entry; same-kind same-length files are compared
  byte by byte, and equal ones are left untouched (not even rewritten);
- extras in the copy are deleted.

Permission bits are copied, ownership is not (the copy belongs to whoever syncs it). Set-uid,
set-gid and sticky bits are dropped: a root sync would otherwise turn the person's set-uid file
into a set-uid-root one. Directories get the source's bits plus ``u+rwx`` so a later sync can
always work in them. The copy's root directory keeps its own mode (0700 for a ScratchCopy).

:class:`FileWork` counts, where "file" means any non-directory entry (directories are never
counted, so a first sync of N files in D directories reports ``created = N``):

- ``created``: source files written where the copy had no file (nothing, or a directory);
- ``rewritten``: source files written in place of a copy file that was deleted because its
  bytes, permission bits or kind differed (a link or fifo a command planted counts here);
- ``removed``: copy files deleted without a source file taking their name: extras, everything
  inside a deleted directory, and a file whose name the source now uses for a directory;
- ``walked``: source entries examined below the root, skipped ones included.

A no-change resync reports ``created = rewritten = removed = 0``.

Bounds are counted on the source side while syncing: more than ``files`` regular files, more
than ``bytes`` bytes in them, or an entry deeper than ``depth`` levels (which also ends a link
loop, since links are followed) refuses with E_COPY_BOUND and deletes the half-synced copy. So
does any failure to read the source (E_STORAGE_FATAL). The source is never written.

The copy side has two implementations with one walk: directory fds (copy_fileops.FdCopy)
wherever the platform has them, else paths checked with lstat (copy_paths.PathCopy, Windows;
its docstring says what it lacks). ``COPY_SIDE`` is chosen once, by probing capability.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pydantic

from orchestrator.copy_fileops import BudgetExceeded, FdCopy, Kind, SourceUnreadable
from orchestrator.copy_paths import PathCopy
from orchestrator.errors import ErrorCode, SprawlError

MAX_FILES = 100_000
MAX_BYTES = 256 * 1024 * 1024
MAX_DEPTH = 64

_BOUND_RECOVERY = 'run in a smaller directory, or use where = "host"'
# The tag becomes part of one file name: no "/" or NUL, and short enough for NAME_MAX (255).
# A link that cannot be resolved: ENOENT dangling, ELOOP pointing at itself, ENOTDIR through a file.
_UNRESOLVED = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)


class FileWork(pydantic.BaseModel, frozen=True):
    """What one sync did; see the module docstring for exactly what each count counts."""

    created: int
    rewritten: int
    removed: int
    walked: int


@dataclass(frozen=True)
class Bounds:
    """Source-side limits of a sync (SPEC §5)."""

    files: int = MAX_FILES
    bytes: int = MAX_BYTES
    depth: int = MAX_DEPTH


H = TypeVar("H")


class CopySide(Protocol[H]):
    """Every operation of a sync on the copy side; ``H`` is an open copy directory. Entries are
    never followed: ``Kind`` is what the entry itself is (copy_fileops.Kind)."""

    def open_parent(self, path: str) -> H: ...
    def open_root(self, name: str, parent: H) -> H: ...
    def close(self, handle: H) -> None: ...
    def kinds(self, handle: H) -> dict[str, Kind]: ...
    def lookup(self, name: str, parent: H) -> Kind | None: ...
    def remove(self, name: str, parent: H, kind: Kind) -> int: ...
    def mkdir(self, name: str, parent: H) -> None: ...
    def open_dir(self, name: str, parent: H) -> H: ...
    def set_dir_mode(self, handle: H, mode: int) -> None: ...
    def same_bytes(self, src_path: str, name: str, parent: H, size: int, mode: int) -> bool: ...
    def copy_file(self, src_path: str, name: str, parent: H, mode: int, budget: int) -> int: ...


def dir_fds_work() -> bool:
    """Whether FdCopy can run here: every dir_fd call it makes, O_DIRECTORY and O_NOFOLLOW."""
    return (
        hasattr(os, "O_DIRECTORY")
        and hasattr(os, "O_NOFOLLOW")
        and hasattr(os, "fchmod")
        and os.scandir in os.supports_fd
        and all(f in os.supports_dir_fd for f in (os.open, os.stat, os.mkdir, os.unlink, os.rmdir))
        and os.stat in os.supports_follow_symlinks
    )


COPY_SIDE: CopySide[Any] = FdCopy() if dir_fds_work() else PathCopy()


@dataclass
class _Dir(Generic[H]):
    """One directory being synced: its source path, the open copy directory and what it held."""

    src: str
    handle: H
    depth: int
    entries: list[os.DirEntry[str]]
    copy: dict[str, Kind]
    next: int = 0


def _list(src: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(src) as it:
            return list(it)
    except OSError as err:
        raise SourceUnreadable(src, err) from err


def _bound_name(which: str, value: int, default: int) -> str:
    return f"MAX_{which.upper()} = {value}" if value == default else f"Bounds.{which} = {value}"


class _Walk(Generic[H]):
    """One sync pass. Depth-first with an explicit stack: only ancestors' fds are open."""

    def __init__(self, side: CopySide[H], source: str, bounds: Bounds, subject: str) -> None:
        self.side = side
        self.source = source  # resolved: the walk must not depend on the caller's cwd or links
        self.bounds = bounds
        self.subject = subject  # the working directory as the caller named it
        self.created = self.rewritten = self.removed = self.walked = 0
        self.files = 0
        self.bytes = 0

    def work(self) -> FileWork:
        return FileWork(
            created=self.created, rewritten=self.rewritten, removed=self.removed, walked=self.walked
        )

    def _refuse(self, detail: str) -> SprawlError:
        return SprawlError(ErrorCode.COPY_BOUND, self.subject, detail, _BOUND_RECOVERY)

    def run(self, root: H) -> None:
        """Sync the source into the open copy root; closes ``root``."""
        side = self.side
        stack: list[_Dir[H]] = []
        try:
            entries = _list(self.source)
            stack.append(_Dir(self.source, root, 0, entries, side.kinds(root)))
        except BaseException:
            side.close(root)
            raise
        try:
            while stack:
                top = stack[-1]
                if top.next == len(top.entries):
                    for name, kind in top.copy.items():
                        self.removed += side.remove(name, top.handle, kind)
                    side.close(stack.pop().handle)
                    continue
                entry = top.entries[top.next]
                top.next += 1
                self.walked += 1
                child = self._entry(top, entry)
                if child is not None:
                    stack.append(child)
        finally:
            for frame in stack:
                side.close(frame.handle)

    def _entry(self, parent: _Dir[H], entry: os.DirEntry[str]) -> _Dir[H] | None:
        depth = parent.depth + 1
        if depth > self.bounds.depth:
            rel = os.path.relpath(entry.path, self.source)
            if len(rel) > 160:  # a link loop repeats itself; the start shows where
                rel = rel[:160] + "…"
            raise self._refuse(
                f"the tree is deeper than {self.bounds.depth} levels: {rel} is at level {depth} "
                f"(bound {_bound_name('depth', self.bounds.depth, MAX_DEPTH)}); a symbolic link "
                "to a directory that contains it makes an endless tree"
            )
        try:
            st = entry.stat()  # follows links: the source side always does
        except OSError as err:
            if err.errno in _UNRESOLVED and (entry.is_symlink() or err.errno == errno.ENOENT):
                return None  # dangling or self-referencing link, or gone since listed
            raise SourceUnreadable(entry.path, err) from err
        if stat.S_ISDIR(st.st_mode):
            return self._dir(parent, entry, st)
        if stat.S_ISREG(st.st_mode):
            self._file(parent, entry, st)
        return None

    def _dir(self, parent: _Dir[H], entry: os.DirEntry[str], st: os.stat_result) -> _Dir[H]:
        side = self.side
        want = stat.S_IMODE(st.st_mode) & 0o777 | 0o700
        entries = _list(entry.path)
        old = parent.copy.pop(entry.name, None)
        if old is not None and old != "dir":
            self.removed += side.remove(entry.name, parent.handle, old)
            old = None
        if old is None:
            side.mkdir(entry.name, parent.handle)
        handle = side.open_dir(entry.name, parent.handle)
        try:
            side.set_dir_mode(handle, want)
            copy = side.kinds(handle) if old is not None else {}
        except BaseException:
            side.close(handle)
            raise
        return _Dir(entry.path, handle, parent.depth + 1, entries, copy)

    def _file(self, parent: _Dir[H], entry: os.DirEntry[str], st: os.stat_result) -> None:
        bounds = self.bounds
        self.files += 1
        if self.files > bounds.files:
            raise self._refuse(
                f"the tree has more than {bounds.files} files "
                f"(bound {_bound_name('files', bounds.files, MAX_FILES)})"
            )
        if self.bytes + st.st_size > bounds.bytes:
            raise self._refuse(self._bytes_detail(self.bytes + st.st_size))
        mode = stat.S_IMODE(st.st_mode) & 0o777
        name = entry.name
        old = parent.copy.pop(name, None)
        fresh = True
        side = self.side
        if old is not None:
            if old == "dir":
                self.removed += side.remove(name, parent.handle, old)
            elif old == "file" and side.same_bytes(
                entry.path, name, parent.handle, st.st_size, mode
            ):
                self.bytes += st.st_size
                return
            else:
                side.remove(name, parent.handle, old)
                fresh = False
        try:
            budget = bounds.bytes - self.bytes
            self.bytes += side.copy_file(entry.path, name, parent.handle, mode, budget)
        except BudgetExceeded:
            raise self._refuse(self._bytes_detail(bounds.bytes + 1)) from None
        if fresh:
            self.created += 1
        else:
            self.rewritten += 1

    def _bytes_detail(self, reached: int) -> str:
        bound = self.bounds.bytes
        return (
            f"the tree holds more than {bound} bytes ({reached} reached after {self.files} "
            f"files; bound {_bound_name('bytes', bound, MAX_BYTES)})"
        )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def delete_path(path: Path) -> None:
    """Delete ``path`` (a copy) without following links in it; no error if it is already gone."""
    side = COPY_SIDE
    try:
        parent = side.open_parent(str(path.parent))
    except FileNotFoundError:
        return
    try:
        kind = side.lookup(path.name, parent)
        if kind is not None:
            side.remove(path.name, parent, kind)
    finally:
        side.close(parent)


def _discarding(err: SprawlError, copy: Path) -> SprawlError:
    """Delete the half-synced copy; say so in the error if that fails too."""
    try:
        delete_path(copy)
    except OSError as gone:
        return SprawlError(
            err.code,
            err.subject,
            f"{err.detail}; the partial copy {copy} could not be deleted either: {gone}",
            err.recovery,
        )
    return err


def sync(source: Path, copy: Path, bounds: Bounds = Bounds()) -> FileWork:
    """Make ``copy`` equal ``source`` file by file (SPEC §5); see the module docstring.

    ``copy`` is made (0700) if missing; its parent must exist. On any refusal or failure the
    copy is deleted before SprawlError is raised.
    """
    source, copy = Path(source), Path(copy)
    src = os.path.realpath(source)
    if not os.path.isdir(src):
        raise SprawlError(
            ErrorCode.STORAGE_FATAL,
            str(source),
            "the working directory to copy is missing or not a directory",
            "run from an existing directory",
        )
    dst = os.path.join(os.path.realpath(copy.parent), copy.name)
    if _inside(dst, src) or _inside(src, dst):
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            str(copy),
            f"the copy {dst} and the working directory {src} overlap; syncing would "
            "copy the copy into itself or delete parts of the working directory",
            "put the scratch directory outside the working directory",
        )
    side = COPY_SIDE
    walk = _Walk(side, src, bounds, str(source))
    try:
        parent = side.open_parent(str(copy.parent))
    except OSError as err:
        raise SprawlError(
            ErrorCode.STORAGE_FATAL,
            str(copy.parent),
            f"cannot open the scratch directory: {err.strerror}",
            "check that the scratch directory exists and is writable",
        ) from err
    try:
        walk.run(side.open_root(copy.name, parent))
    except SprawlError as err:
        raise _discarding(err, copy) from err.__cause__
    except SourceUnreadable as err:
        cause = err.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.ELOOP:
            # Seen on Linux 5.x/6.x: a path through ~30 links to an ancestor can already
            # fail with ELOOP before the depth bound is reached (the kernel's 40-link
            # budget also counts links met while resolving each absolute target). It is
            # the same endless tree the depth bound exists to end, so refuse it as one.
            rel = os.path.relpath(err.path, src)
            rel = rel if len(rel) <= 160 else rel[:160] + "…"
            raise _discarding(
                walk._refuse(
                    f"following symbolic links to {rel} fails with ELOOP before the depth bound "
                    f"(bound {_bound_name('depth', bounds.depth, MAX_DEPTH)}); a symbolic link "
                    "to a directory that contains it makes an endless tree"
                ),
                copy,
            ) from cause
        raise _discarding(
            SprawlError(
                ErrorCode.STORAGE_FATAL,
                err.path,
                f"cannot read it to copy it: {err.reason}; the partial copy is deleted",
                "make the file readable, or remove it from the working directory",
            ),
            copy,
        ) from err.__cause__
    except OSError as err:
        raise _discarding(
            SprawlError(
                ErrorCode.STORAGE_FATAL,
                str(copy),
                f"syncing {src} into the copy failed: {err}; the partial copy is deleted",
                "check free space and permissions in the scratch directory",
            ),
            copy,
        ) from err
    finally:
        side.close(parent)
    return walk.work()
