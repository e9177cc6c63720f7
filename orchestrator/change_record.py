"""What a sync left, recorded so `changes` can be a walk and `apply` can find conflicts (SPEC §5).

A :class:`SyncRecord` holds, per path relative to the working directory:

- ``copy``: the lstat stamp of each entry of the copy as the command got it (taken after the
  sync and after the arm readied the copy, just before the command starts);
- ``source``: the stat stamp (links followed, as the sync follows them) of each source entry,
  taken *before* the sync read it. A source file changed after the stamp has a different stamp
  at apply time (a conflict), so the stamp can only err towards refusing;
- ``hashes``: sha256 of the copy's bytes right after the sync, for files whose source stamp is
  too young to trust (below): then the content itself says whether the source changed;
- ``trusted_below_ns``: the ctime of a file made on the copy's filesystem after the copy
  stamps were taken. Every change to an entry sets its ctime to the filesystem's current time,
  which cannot be earlier than that (Linux hands out timestamps monotonically, multigrain
  ctime included), so a copy stamp whose ctime is below it changes whenever the entry does:
  git's racy-clean rule, with the filesystem's own clock instead of a guessed granularity.

The source side cannot be written (not even a marker), so its stamps use the wall clock: a
source ctime within ``SOURCE_RACY_NS`` of the walk's start is not trusted, and its bytes are
hashed from the fresh copy instead.

The ``copies`` engineer's persistent copy record (docs: copies-api) will supply the same
stamps from the sync itself; :func:`take` is the stand-alone way until then.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Kind = Literal["file", "dir", "link", "other"]
# Coarse clocks tick every 1-10 ms; FAT-like filesystems keep 2 s. Past this, a stamp is exact.
SOURCE_RACY_NS = 2_000_000_000
# Racy source files are hashed from the copy; past this many bytes they stay unproven
# (apply then refuses them as conflicts rather than guess).
HASH_BUDGET = 64 * 1024 * 1024
WALK_DEPTH = 64


# (st_mode, st_size, st_mtime_ns, st_ctime_ns, st_ino, st_dev): a plain tuple, so the walk
# after each command compares without building objects (benchmarks/changes_walk.py).
Stamp = tuple[int, int, int, int, int, int]


def stamp_of(st: os.stat_result) -> Stamp:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def kind_of(mode: int) -> Kind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


@dataclass
class SyncRecord:
    copy: dict[str, Stamp] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)  # the copy's links
    # The copy stamps by directory ("" is the root) and name: the walk after the command
    # looks names up without building a path per entry.
    by_dir: dict[str, dict[str, Stamp]] = field(default_factory=dict)
    source: dict[str, Stamp] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    trusted_below_ns: int = 0
    source_walk_ns: int = 0  # wall clock when the source walk started

    def copy_trusted(self, stamp: Stamp) -> bool:
        return stamp[3] < self.trusted_below_ns

    def source_trusted(self, stamp: Stamp) -> bool:
        return stamp[3] < self.source_walk_ns - SOURCE_RACY_NS


def walk_copy(root: Path) -> Iterator[tuple[str, os.stat_result, str]]:
    """(relative path, lstat, absolute path) of every entry under ``root``; links never
    followed. Directories come before their contents."""
    stack = [("", str(root))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        with os.scandir(abs_dir) as it:
            for entry in it:
                rel = entry.name if not rel_dir else f"{rel_dir}/{entry.name}"
                st = entry.stat(follow_symlinks=False)
                yield rel, st, entry.path
                if stat.S_ISDIR(st.st_mode):
                    stack.append((rel, entry.path))


def snapshot_copy(root: Path) -> tuple[dict[str, Stamp], dict[str, str]]:
    out: dict[str, Stamp] = {}
    targets: dict[str, str] = {}
    for rel, st, path in walk_copy(root):
        if stat.S_ISLNK(st.st_mode):
            targets[rel] = os.readlink(path)
        out[rel] = stamp_of(st)
    return out, targets


def snapshot_source(root: Path) -> dict[str, Stamp]:
    """Stamps of the working directory as the sync sees it (links followed, bounded depth).
    Unreadable or vanishing entries are left out: a path without a source stamp is never
    taken as unchanged."""
    out: dict[str, Stamp] = {}
    stack = [("", str(root), 0)]
    while stack:
        rel_dir, abs_dir, depth = stack.pop()
        if depth >= WALK_DEPTH:
            continue
        try:
            it = os.scandir(abs_dir)
        except OSError:
            continue
        with it:
            for entry in it:
                rel = entry.name if not rel_dir else f"{rel_dir}/{entry.name}"
                try:
                    st = entry.stat()
                except OSError:
                    continue
                out[rel] = stamp_of(st)
                if stat.S_ISDIR(st.st_mode):
                    stack.append((rel, entry.path, depth + 1))
    return out


def fs_now_ns(directory: Path) -> int:
    """The ctime a change made now gets on ``directory``'s filesystem (an unnamed temp file:
    O_TMPFILE on Linux, so nothing is left behind even if we die here)."""
    with tempfile.TemporaryFile(dir=directory) as marker:
        return os.fstat(marker.fileno()).st_ctime_ns


def sha256_of(path: str | Path) -> str | None:
    """The file's sha256, without following a link at ``path``; None if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def source_stamps_before_sync(workdir: Path) -> tuple[dict[str, Stamp], int]:
    """Stamp the source before the sync reads it (see the module docstring)."""
    started = time.time_ns()
    return snapshot_source(workdir), started


def finish(copy_root: Path, source: dict[str, Stamp], source_walk_ns: int) -> SyncRecord:
    """The record of a synced and readied copy; call just before the command starts."""
    record = SyncRecord(source=source, source_walk_ns=source_walk_ns)
    record.copy, record.targets = snapshot_copy(copy_root)
    record.by_dir = {"": {}}
    for rel, stamp in record.copy.items():
        head, _, name = rel.rpartition("/")
        record.by_dir.setdefault(head, {})[name] = stamp
        if stat.S_ISDIR(stamp[0]):
            record.by_dir.setdefault(rel, {})
    record.trusted_below_ns = fs_now_ns(copy_root.parent)
    budget = HASH_BUDGET
    for rel, stamp in record.copy.items():
        src = source.get(rel)
        if not stat.S_ISREG(stamp[0]) or src is None or record.source_trusted(src):
            continue
        if stamp[1] > budget:
            continue
        digest = sha256_of(copy_root / rel)
        if digest is not None:
            record.hashes[rel] = digest
            budget -= stamp[1]
    return record
