"""What a sync left, recorded so `changes` can be a walk and `apply` can find conflicts (design §5).

A :class:`SyncRecord` holds, per path relative to the working directory:

- ``by_dir``: the lstat of each entry of the copy as the command got it, by directory and name.
  Built on the sync that just ran (copy_stamps.SyncRecord.copy_by_dir: the stat of each copy
  file the sync took when it settled it, its last touch of that file), plus an lstat of each
  directory and link taken here, after the sync and after the arm readied the copy, just
  before the command starts. Without that sync's in-memory record, or when the arm re-owned
  entries of the copy (the container arms' lchown sets their ctimes), the copy is walked
  instead (:func:`snapshot_copy`). A stale stamp can only cost time, never hide a change: an
  entry whose stamp no longer matches has its bytes compared (changes.py);
- ``source``: the stamp of each source entry as the sync read it, decoded from the sync's
  record only for the paths that are asked about (a changed path, at `changes` and `apply`
  time): a source file changed since has another stamp at apply time, or a ctime past
  ``source_line_ns`` (the sync's start minus its filesystem margin);
- ``hashes``: sha256 of the copy's bytes right after the sync, for files whose source stamp is
  past that line (changed during or just before the sync; the sync lists them): then the
  bytes themselves say whether the source changed since;
- ``trusted_below_ns``: the ctime of a file made on the copy's filesystem after the copy
  stamps were taken. Every change to an entry sets its ctime to the filesystem's current time,
  which cannot be earlier than that (Linux hands out timestamps monotonically, multigrain
  ctime included), so a copy stamp whose ctime is below it changes whenever the entry does:
  git's racy-clean rule, with the filesystem's own clock instead of a guessed granularity.
  It is 0 (nothing trusted, every file's bytes compared) on a filesystem fs_clock does not
  know: there ``st_ctime`` may not move on a write (Windows reports the creation time).

Only the system clock stepping back (root, or CAP_SYS_TIME, which no arm grants) defeats it.
"""

from __future__ import annotations

import hashlib
import operator
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.core import fs_clock
from sprawl_orch.core.beneath import open_file

Kind = Literal["file", "dir", "link", "other"]
# Racy source files are hashed from the copy; past this many bytes they stay unproven
# (apply then refuses them as conflicts rather than guess).
HASH_BUDGET = 64 * 1024 * 1024


# (st_mode, st_size, st_mtime_ns, st_ctime_ns, st_ino, st_dev): a source stamp (apply
# compares it with the source file's stat, change_store keeps it).
Stamp = tuple[int, int, int, int, int, int]
# The copy's entries by directory ("" the root, "/"-separated) and name: the walk after the
# command looks names up without building a path per entry (benchmarks/changes_walk.py).
ByDir = dict[str, dict[str, os.stat_result]]
CtimesByDir = dict[str, dict[str, int]]


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


def _slashed(rel: str) -> str:
    return rel if os.sep == "/" else rel.replace(os.sep, "/")


def _native(rel: str) -> str:
    return rel if os.sep == "/" else rel.replace("/", os.sep)


@dataclass
class SyncRecord:
    # Every copy entry's ctime by directory and name, -1 for directories and for ctimes not
    # below trusted_below_ns: what the walk after the command compares first. Plain ints
    # (the sync's own, for files): nothing to build per entry before each command.
    ctimes: CtimesByDir = field(default_factory=dict)
    # The lstat of the entries the sync's record does not describe (directories and links;
    # every entry when the copy was walked instead).
    stats: ByDir = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)  # the copy's links
    # The sync's own record: source and copy stamps of files, decoded only when asked.
    sync: copy_stamps.SyncRecord | None = None
    source_dirs: dict[str, Stamp] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    trusted_below_ns: int = 0
    source_line_ns: int = 0  # a source stamp with a ctime below this is trusted
    root: os.stat_result | None = None  # the copy's root directory

    def was(self, rel_dir: str, name: str) -> Stamp | None:
        """The recorded stamp of the copy entry ``name`` in ``rel_dir``; None if it had none."""
        st = self.stats.get(rel_dir, {}).get(name)
        if st is not None:
            return stamp_of(st)
        if self.sync is None or name not in self.ctimes.get(rel_dir, {}):
            return None
        f = self.sync.file(_native(rel_dir + "/" + name if rel_dir else name))
        if f is None:
            return None
        size, mtime, ctime, ino, dev = f.copy
        return (stat.S_IFREG | f.mode, size, mtime, ctime, ino, dev)

    def entries(self) -> Iterator[tuple[str, Stamp]]:
        """(relative path, stamp) of every copy entry."""
        for rel_dir, names in self.ctimes.items():
            prefix = rel_dir + "/" if rel_dir else ""
            for name in names:
                stamp = self.was(rel_dir, name)
                if stamp is not None:
                    yield prefix + name, stamp

    def source(self, rel: str) -> Stamp | None:
        """The stamp the sync read of the source entry ``rel`` ("/"-separated); None for a
        path the sync did not copy as a file or directory (a link kept as a link has none)."""
        stamp = self.source_dirs.get(rel)
        if stamp is not None or self.sync is None:
            return stamp
        f = self.sync.file(_native(rel))
        if f is None:
            return None
        size, mtime, ctime, ino, dev = f.source
        return (stat.S_IFREG | (f.mode & 0o777), size, mtime, ctime, ino, dev)

    def copy_trusted(self, stamp: Stamp) -> bool:
        return stamp[3] < self.trusted_below_ns

    def source_trusted(self, stamp: Stamp) -> bool:
        return stamp[3] < self.source_line_ns


def snapshot_copy(root: Path) -> tuple[ByDir, dict[str, str]]:
    """lstat of every entry under ``root`` by directory ("" is the root) and name, and the
    targets of its links. One tight walk, for a copy the sync's record cannot describe."""
    by_dir: ByDir = {}
    targets: dict[str, str] = {}
    stack = [("", str(root))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        names: dict[str, os.stat_result] = {}
        by_dir[rel_dir] = names
        prefix = rel_dir + "/" if rel_dir else ""
        with os.scandir(abs_dir) as it:
            for entry in it:
                st = names[entry.name] = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append((prefix + entry.name, entry.path))
                elif stat.S_ISLNK(st.st_mode):
                    targets[prefix + entry.name] = os.readlink(entry.path)
    return by_dir, targets


_CTIME = operator.attrgetter("st_ctime_ns")


def built_on_sync(
    sync: copy_stamps.SyncRecord, files: CtimesByDir, record: SyncRecord, root: Path
) -> None:
    """Fill ``record`` with what :func:`snapshot_copy` would find in a copy the sync just
    made: each file's ctime as the sync took it when it settled the file (``files``, its
    last touch of it), and an lstat of each directory and link now -- the sync changed
    directories after settling their files (extras removed, modes set), never a settled file."""
    record.ctimes = {_slashed(d): dict(names) for d, names in files.items()}
    top = str(root)

    def add(rel: str) -> bool:
        try:
            st = os.lstat(os.path.join(top, rel))
        except OSError:
            return False  # gone: the walk after the command does not meet it either
        head, _, name = _slashed(rel).rpartition("/")
        record.stats.setdefault(head, {})[name] = st
        record.ctimes.setdefault(head, {})[name] = st.st_ctime_ns
        return True

    for rel in sync.dirs:
        if add(rel):
            record.ctimes.setdefault(_slashed(rel), {})
    for rel, target in sync.links.items():
        if add(rel):
            record.targets[_slashed(rel)] = target


def _walked(record: SyncRecord, root: Path) -> None:
    record.stats, record.targets = snapshot_copy(root)
    record.ctimes = {
        d: dict(zip(names, map(_CTIME, names.values()), strict=True))
        for d, names in record.stats.items()
    }


def _untrust(ctimes: CtimesByDir, line: int) -> None:
    """-1 for directories (the walk after the command looks at each itself) and for ctimes
    not below the trusted line (C-level max per directory: this runs before every command)."""
    for rel_dir, found in ctimes.items():
        if found and max(found.values()) >= line:
            for name, ctime in found.items():
                if ctime >= line:
                    found[name] = -1
        if rel_dir:
            head, _, name = rel_dir.rpartition("/")
            if name in ctimes.get(head, {}):
                ctimes[head][name] = -1


def fs_now_ns(directory: Path) -> int:
    """The ctime a change made now gets on ``directory``'s filesystem (an unnamed temp file:
    O_TMPFILE on Linux, so nothing is left behind even if we die here)."""
    with tempfile.TemporaryFile(dir=directory) as marker:
        return os.fstat(marker.fileno()).st_ctime_ns


def sha256_of(path: str | Path) -> str | None:
    """The file's sha256, without following a link at ``path``; None if unreadable."""
    try:
        fd = open_file(path)
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


def norm_mode(mode: int) -> int:
    """The file type and the permission bits a sync carries (set-uid/gid/sticky never)."""
    return stat.S_IFMT(mode) | (mode & 0o777)


def source_dirs(sync: copy_stamps.SyncRecord, workdir: Path) -> dict[str, Stamp]:
    """Stamps of the source directories, stat-ed here, right after the sync (its record has
    none). Apply compares only their kind, mode and inode, and removes one only with rmdir,
    so what the person put in it is never lost -- only a chmod of the directory itself in the
    moment between the sync and this stat could be overridden by the command's. Files'
    stamps are the ones the sync recorded with the bytes it copied (SyncRecord.source); links
    kept as links get none: apply never writes over a link anyway."""
    out: dict[str, Stamp] = {}
    for rel in sync.dirs:
        try:
            st = os.stat(os.path.join(workdir, rel))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out[_slashed(rel)] = (
                norm_mode(st.st_mode),
                0,
                st.st_mtime_ns,
                st.st_ctime_ns,
                st.st_ino,
                st.st_dev,
            )
    return out


def finish(
    copy_root: Path, sync: copy_stamps.SyncRecord | None, workdir: Path, *, walk: bool = False
) -> SyncRecord:
    """The record of a synced and readied copy; call just before the command starts.
    ``sync``: the record of the sync that made the copy (None: no source stamps, so apply
    refuses all but creations); ``walk``: the arm changed the copy's entries after it."""
    record = SyncRecord(sync=sync)
    if sync is not None:
        record.source_line_ns = sync.started_ns - sync.granularity_ns
        record.source_dirs = source_dirs(sync, workdir)
    if sync is not None and sync.copy_ctimes is not None and not walk:
        built_on_sync(sync, sync.copy_ctimes, record, copy_root)
    else:
        _walked(record, copy_root)
    record.root = os.lstat(copy_root)
    # Taken after every stamp above: see the module docstring.
    if fs_clock.granularity_ns(record.root.st_dev) is not None:
        record.trusted_below_ns = fs_now_ns(copy_root.parent)
    _untrust(record.ctimes, record.trusted_below_ns)
    if sync is not None:
        # Racy source files: the sync lists them when it kept its in-memory record.
        racy = sync.recent if sync.copy_ctimes is not None else sync.paths
        _hash_racy(record, (_slashed(p) for p in racy), copy_root)
    return record


def mounts_inside(root: Path) -> bool | None:
    """Whether anything is mounted at or below ``root`` in this process's mount namespace
    (a FUSE mount shows whatever inode and ctime it likes; our walk would see through it);
    None when /proc/self/mountinfo cannot be read."""
    top = os.path.realpath(root)
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(b" ", 5)
        if len(fields) < 5:
            continue
        # proc(5): the mount point is field 5, with space, tab, newline and backslash octal
        # escaped (\040 ...).
        point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4]))
        if point == top or point.startswith(top.rstrip("/") + "/"):
            return True
    return False


def _hash_racy(record: SyncRecord, paths: Iterable[str], copy_root: Path) -> None:
    budget = HASH_BUDGET
    for rel in paths:
        src = record.source(rel)
        if src is None or record.source_trusted(src):
            continue
        head, _, name = rel.rpartition("/")
        was = record.was(head, name)
        if was is None or not stat.S_ISREG(was[0]) or was[1] > budget:
            continue
        digest = sha256_of(copy_root / rel)
        if digest is not None:
            record.hashes[rel] = digest
            budget -= was[1]
