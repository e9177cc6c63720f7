"""The synced copy (design §5): make a private copy equal to the working directory, file by file.

Sandbox arms run each command in a copy that is kept between commands (and, through
copy_store, between CLI calls) and synced to the working directory as it is now before each:

- a relative symbolic link whose every resolution step stays inside the tree is copied as the
  same link (copy_links); any other link is followed on the source side: a link out of the
  tree brings the content it points at, never a link back into the person's tree. A dangling
  link (or one that points at itself) of that kind is copied as nothing; fifos, sockets and
  devices are skipped, each named with why in the result's ``skipped``. Whatever the copy
  holds under a skipped name is deleted like any extra.
  A followed link to a directory that contains it is found by the loop check and refused;
- the copy side never follows links (the previous command wrote it, see copy_fileops);
- an item of a different kind, or a regular file whose bytes, permission bits or mtime
  differ, is deleted and copied afresh as a new directory entry; same-kind same-length files
  with the same mtime are equal when git's racy-clean rule vouches for their recorded stamps
  (copy_stamps), else when their bytes compare equal; equal ones are left untouched;
- extras in the copy, and everything under an ``[sandbox.copy] exclude`` pattern, are deleted.

Modification times are kept, in nanoseconds, as ``cp -a`` keeps them (issue 23: a ``.pyc`` or a
make target built against the source must stay valid in the copy): each new file gets its
source's atime and mtime, each kept link its own, and each directory its source's once its last
entry was written or removed. Permission bits are copied, ownership is not (the copy belongs
to whoever syncs it). Set-uid, set-gid and sticky bits are dropped: a root sync would
otherwise turn the person's set-uid file into a set-uid-root one. Directories get the
source's bits plus ``u+rwx`` so a later sync can always work in them. The copy's root
directory is 0700, made so and restored by every sync (a command's ``chmod 000 .`` must not
break the copy for good, issue 27).

:class:`FileWork` counts, where "file" means any non-directory entry (directories are never
counted, so a first sync of N files in D directories reports ``created = N``):

- ``created``: source files (or kept links) written where the copy had no file;
- ``rewritten``: source files written in place of a copy file that was deleted because its
  bytes, permission bits, link target or kind differed (a link a command planted counts here);
- ``removed``: copy files deleted without a source file taking their name: extras, everything
  inside a deleted directory, and a file whose name the source now uses for a directory;
- ``walked``: source entries examined below the root, skipped and excluded ones included.

A no-change resync reports ``created = rewritten = removed = 0``.

Bounds (copy_bounds) are counted on the source side while syncing, and the file bound also
before a sync that has no kept copy to compare against (copy_bounds.count_files: a listing
only, so a tree over it is refused before anything is copied); over one -- or on any
failure to read the source (E_STORAGE_FATAL) -- the half-synced copy and its record are
deleted. The source is never written.

New files are written by copy workers (copy/pool.py: threads, as each file's create, copy and
utime are system calls) where the copy side is directory fds; the walk still judges, counts
and opens every source file itself, and a directory's times wait for its last worker.

The copy side has two implementations with one walk (copy_walk): directory fds
(copy_fileops.FdCopy) wherever the platform has them, else paths checked with lstat
(copy_paths.PathCopy, Windows; its docstring says what it lacks). ``COPY_SIDE`` is chosen
once, by probing capability.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sprawl_orch.copy import refusals
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.bounds import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_FILES,
    Bounds,
    Excludes,
    count_files,
)
from sprawl_orch.copy.fileops import FdCopy, SourceUnreadable
from sprawl_orch.copy.memory import CopyMemory
from sprawl_orch.copy.paths import PathCopy
from sprawl_orch.copy.walk import CopySide, FileWork, Progress, Walk
from sprawl_orch.copy.walk_memory import MemoryWrong, memory_walk
from sprawl_orch.core.credential_places import Guard
from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors
from sprawl_orch.core.removal import delete_path, dir_fds_work

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_FILES",
    "Bounds",
    "CopySide",
    "Excludes",
    "FileWork",
    "delete_path",
    "dir_fds_work",
    "sync",
    "sync_with_record",
]


COPY_SIDE: CopySide[Any] = FdCopy() if dir_fds_work() else PathCopy()


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


_GONE = {False: "; the partial copy is deleted", True: ""}  # keep: the caller says what it did


def _discarding(
    err: SprawlError, copy: Path, record: Path | None, keep: bool = False
) -> SprawlError:
    """Delete the half-synced copy (unless ``keep``) and its record; say so in the error if
    that fails too."""
    try:
        if record is not None:
            copy_stamps.forget(record)
        if not keep:
            delete_path(copy)
    except OSError as gone:
        return SprawlError(
            err.code,
            err.subject,
            f"{err.detail}; the partial copy {copy} could not be deleted either: {gone}",
            err.recovery,
        )
    return err


def sync(
    source: Path,
    copy: Path,
    bounds: Bounds = Bounds(),
    *,
    record: Path | None = None,
    excludes: Excludes | None = None,
    progress: Progress | None = None,
    guard: Guard | None = None,
) -> FileWork:
    """Make ``copy`` equal ``source`` file by file (design §5); see sync_with_record."""
    return sync_with_record(
        source, copy, bounds, record=record, excludes=excludes, progress=progress, guard=guard
    )[0]


def sync_with_record(
    source: Path,
    copy: Path,
    bounds: Bounds = Bounds(),
    *,
    record: Path | None = None,
    excludes: Excludes | None = None,
    progress: Progress | None = None,
    guard: Guard | None = None,
    touched: list[str] | None = None,
    before: Callable[[str, bool], None] | None = None,
    keep: bool = False,
    memory: CopyMemory | None = None,
) -> tuple[FileWork, copy_stamps.SyncRecord]:
    """Make ``copy`` equal ``source`` file by file (design §5); see the module docstring.
    Returns what the sync did and the new stamp record (saved to ``record`` if given).

    ``copy`` is made (0700) if missing; its parent must exist. ``record``: where the stamp
    record of this copy lives (copy_stamps; outside the copy, where no command can write it):
    read to skip byte comparisons the racy-clean rule allows, replaced once the sync succeeded.
    ``guard``: what a link out of the tree may bring (core.credential_places.copy_refusal);
    the entries it refuses are left out and named in the result's ``refused_links``.
    ``touched``: given a list, every path the sync created, replaced or removed in the copy is
    appended to it; ``before`` is called with each such path just before (and with True
    before only a directory's permission bits change), see walk.Walk.before. ``progress``
    hears (files, bytes, done) now and then, and with ``done`` at the end. On any refusal or
    failure the copy and its record are deleted before
    SprawlError is raised -- but for ``keep``: then only the record goes, and the caller
    puts the copy back (a workspace's base: ``before`` told it every path written).
    ``memory``: a memory of the copy's side that copy.memory.gate let through (design §5.1):
    the copy side of remembered directories is not walked; a copy found not as remembered
    runs today's walk from the start.
    """
    source, copy = Path(source), Path(copy)
    excludes = excludes or Excludes()
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
    if memory is not None and (
        not isinstance(side, FdCopy)
        or touched is not None
        or before is not None
        or copy_stamps.usable(memory.record, src, excludes.patterns) is None
    ):
        memory = None
    if memory is not None:
        try:
            return _synced(source, copy, src, bounds, record, excludes, progress, guard, memory)
        except MemoryWrong:
            pass  # today's walk, from the start: it is exact from any state of the copy
    old = copy_stamps.usable(copy_stamps.load(record), src, excludes.patterns) if record else None
    if old is None:
        # No kept copy to compare against: every file would be copied. Refuse a tree over the
        # file bound within the cost of listing it, not after copying bound + 1 files.
        counted = count_files(src, excludes, bounds.files)
        if counted > bounds.files:
            detail, key = refusals.counted_detail(counted, bounds)
            refusal = refusals.refusal(
                src, str(source), excludes, bounds, detail, key, bound="files", reached=counted
            )
            raise _discarding(refusal, copy, record, keep)
    walk = Walk(
        side,
        src,
        bounds,
        str(source),
        excludes,
        old,
        progress,
        guard=guard,
        touched=touched,
        before=before,
    )
    return _run(walk, source, copy, src, record, old, progress, keep)


def _synced(
    source: Path,
    copy: Path,
    src: str,
    bounds: Bounds,
    record: Path | None,
    excludes: Excludes,
    progress: Progress | None,
    guard: Guard | None,
    memory: CopyMemory,
) -> tuple[FileWork, copy_stamps.SyncRecord]:
    walk = memory_walk(
        memory, COPY_SIDE, src, bounds, str(source), excludes, memory.record, progress, guard=guard
    )
    return _run(walk, source, copy, src, record, memory.record, progress, False)


def _run(
    walk: Walk[Any],
    source: Path,
    copy: Path,
    src: str,
    record: Path | None,
    old: copy_stamps.SyncRecord | None,
    progress: Progress | None,
    keep: bool,
) -> tuple[FileWork, copy_stamps.SyncRecord]:
    side = walk.side
    with os_errors(
        ErrorCode.STORAGE_FATAL,
        copy.parent,
        "cannot open the scratch directory",
        "check that the scratch directory exists and is writable",
    ):
        parent = side.open_parent(str(copy.parent))
    done = True
    try:
        walk.run(side.open_root(copy.name, parent))
        walk.new.total_bytes = walk.bytes
        if record is not None and (walk.dirty or old is None):
            copy_stamps.save(walk.new, record)
    except MemoryWrong:
        done = False  # today's walk follows and reports
        raise
    except SprawlError as err:
        raise _discarding(err, copy, record, keep) from err.__cause__
    except SourceUnreadable as err:
        cause = err.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.ELOOP:
            # Seen on Linux 5.x/6.x: a path through ~30 links to an ancestor can already
            # fail with ELOOP before the loop check sees the ancestor (the kernel's 40-link
            # budget also counts links met while resolving each absolute target). It is
            # the same endless tree the loop check exists to end, so refuse it as one.
            rel = os.path.relpath(err.path, src)
            refusal = walk.refuse_depth(
                rel,
                rel.count(os.sep) + 1,
                "following symbolic links fails with ELOOP (a "
                "symbolic link to a directory that contains it makes an endless tree)",
            )
            raise _discarding(refusal, copy, record, keep) from cause
        raise _discarding(
            SprawlError(
                ErrorCode.STORAGE_FATAL,
                err.path,
                f"cannot read it to copy it: {err.reason}{_GONE[keep]}",
                "make the file readable, or remove it from the working directory",
            ),
            copy,
            record,
            keep,
        ) from err.__cause__
    except OSError as err:
        raise _discarding(
            SprawlError(
                ErrorCode.STORAGE_FATAL,
                str(copy),
                f"syncing {src} into the copy failed: {err}{_GONE[keep]}",
                "check free space and permissions in the scratch directory",
            ),
            copy,
            record,
            keep,
        ) from err
    finally:
        side.close(parent)
        if progress is not None and done:
            progress(walk.files, walk.bytes, True)
    return walk.work(), walk.new
