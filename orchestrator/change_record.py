"""What a sync left, recorded so `changes` can be a walk and `apply` can find conflicts (design §5).

A :class:`SyncRecord` holds, per path relative to the working directory:

- ``by_dir``: the lstat stamp of each entry of the copy as the command got it (taken after the
  sync and after the arm readied the copy, just before the command starts);
- ``source``: the stamp of each source entry as the sync read it (copy_stamps' record of that
  sync, see :func:`source_from_sync`): a source file changed since has another stamp at apply
  time, or a ctime past ``source_line_ns`` (the sync's start minus its filesystem margin);
- ``hashes``: sha256 of the copy's bytes right after the sync, for files whose source stamp is
  past that line (changed during or just before the sync): then the bytes themselves say
  whether the source changed since;
- ``trusted_below_ns``: the ctime of a file made on the copy's filesystem after the copy
  stamps were taken. Every change to an entry sets its ctime to the filesystem's current time,
  which cannot be earlier than that (Linux hands out timestamps monotonically, multigrain
  ctime included), so a copy stamp whose ctime is below it changes whenever the entry does:
  git's racy-clean rule, with the filesystem's own clock instead of a guessed granularity.

Only the system clock stepping back (root, or CAP_SYS_TIME, which no arm grants) defeats it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sprawl_orch import copy_stamps

Kind = Literal["file", "dir", "link", "other"]
# Racy source files are hashed from the copy; past this many bytes they stay unproven
# (apply then refuses them as conflicts rather than guess).
HASH_BUDGET = 64 * 1024 * 1024


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
    # The copy stamps by directory ("" is the root) and name: the walk after the command
    # looks names up without building a path per entry.
    by_dir: dict[str, dict[str, Stamp]] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)  # the copy's links
    # by_dir's trusted entries as (ctime_ns, inode): what the walk after the command compares.
    fast: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    source: dict[str, Stamp] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    trusted_below_ns: int = 0
    source_line_ns: int = 0  # a source stamp with a ctime below this is trusted

    def entries(self) -> Iterator[tuple[str, Stamp]]:
        """(relative path, stamp) of every copy entry."""
        for rel_dir, names in self.by_dir.items():
            prefix = rel_dir + "/" if rel_dir else ""
            for name, stamp in names.items():
                yield prefix + name, stamp

    def copy_trusted(self, stamp: Stamp) -> bool:
        return stamp[3] < self.trusted_below_ns

    def source_trusted(self, stamp: Stamp) -> bool:
        return stamp[3] < self.source_line_ns


def snapshot_copy(root: Path) -> tuple[dict[str, dict[str, Stamp]], dict[str, str]]:
    """lstat stamps of every entry under ``root`` by directory ("" is the root) and name, and
    the targets of its links. One tight walk: it runs before every command."""
    by_dir: dict[str, dict[str, Stamp]] = {}
    targets: dict[str, str] = {}
    stack = [("", str(root))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        names: dict[str, Stamp] = {}
        by_dir[rel_dir] = names
        prefix = rel_dir + "/" if rel_dir else ""
        with os.scandir(abs_dir) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                mode = st.st_mode
                names[entry.name] = (mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                     st.st_ino, st.st_dev)
                if stat.S_ISDIR(mode):
                    stack.append((prefix + entry.name, entry.path))
                elif stat.S_ISLNK(mode):
                    targets[prefix + entry.name] = os.readlink(entry.path)
    return by_dir, targets


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


def norm_mode(mode: int) -> int:
    """The file type and the permission bits a sync carries (set-uid/gid/sticky never)."""
    return stat.S_IFMT(mode) | (mode & 0o777)


def source_from_sync(sync: copy_stamps.SyncRecord, workdir: Path) -> tuple[dict[str, Stamp], int]:
    """The source stamps the sync itself recorded (copy_stamps), as ``Stamp``s, and the line
    below which a source ctime is trusted (the sync's start minus its filesystem margin).

    Files: the stamp the sync recorded with the bytes it copied, so a source changed after it
    read them has another stamp, or a ctime past the line (then apply compares bytes with the
    copy's hash). Directories are stat-ed here, right after the sync (the record has no stamps
    of them); apply compares only their kind, mode and inode, and removes one only with
    rmdir, so what the person put in it is never lost — only a chmod of the directory itself
    in the moment between the sync and this stat could be overridden by the command's.
    Links kept as links get no stamp: apply never writes over a link anyway."""
    line = sync.started_ns - sync.granularity_ns
    out: dict[str, Stamp] = {}
    sep = os.sep
    for rel, f in sync.files().items():
        size, mtime, ctime, ino, dev = f.source
        out[rel.replace(sep, "/")] = (stat.S_IFREG | (f.mode & 0o777), size, mtime, ctime, ino,
                                      dev)
    for rel in sync.dirs:
        try:
            st = os.stat(os.path.join(workdir, rel))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out[rel.replace(sep, "/")] = (norm_mode(st.st_mode), 0, st.st_mtime_ns,
                                          st.st_ctime_ns, st.st_ino, st.st_dev)
    return out, line


def finish(copy_root: Path, source: dict[str, Stamp], source_line_ns: int) -> SyncRecord:
    """The record of a synced and readied copy; call just before the command starts."""
    record = SyncRecord(source=source, source_line_ns=source_line_ns)
    record.by_dir, record.targets = snapshot_copy(copy_root)
    record.trusted_below_ns = line = fs_now_ns(copy_root.parent)
    record.fast = {d: {n: (st[3], st[4]) for n, st in names.items() if st[3] < line}
                   for d, names in record.by_dir.items()}
    budget = HASH_BUDGET
    for rel, src in source.items():
        if src[3] < source_line_ns or not stat.S_ISREG(src[0]):
            continue  # trusted (the common case, so tested first), or not a file
        head, _, name = rel.rpartition("/")
        stamp = record.by_dir.get(head, {}).get(name)
        if stamp is None or not stat.S_ISREG(stamp[0]) or stamp[1] > budget:
            continue
        digest = sha256_of(copy_root / rel)
        if digest is not None:
            record.hashes[rel] = digest
            budget -= stamp[1]
    return record
