"""A workspace's tree against its base in ONE walk (issue 23: a workspace command <= 1.1x a
persistent-copy command).

The agent's ``tree`` is walked (scandir + lstat: a command wrote it, so nothing of it is
known without looking). The base side is read from the base's stamp record (copy/stamps.py)
instead of walking ``base``: right after the base sync it lists every file of ``base`` with
``base``'s own stamps and permission bits, every link with its target and every directory.
That is exact because nothing but that sync writes ``base``: commands run in ``tree`` only,
``base`` lives in the private state directory, and the flow-in only reads it. A sync killed
midway leaves the old record beside a changed ``base``; the workspace marks a flow in
progress, and while that mark stands the base is walked instead (:func:`record_of`).

Bytes are only skipped by the racy-clean rule (copy/stamps.py): the ``clean`` record holds,
for each file pair found equal, the tree file's stamp (size, mtime, ctime, inode, device,
st_mode) and the base file's recorded stamp, and a line taken from the filesystem's clock
after the walk that found them (``started_ns``). Any later write, chmod, utime or rename of
either file sets a ctime at or past that line, which no command can set back. A walk only
records (``learn``) while none of the workspace's commands runs, so nothing writes ``tree``
between the stamps and the line.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from sprawl_orch.changes.changes import ChangeEntry, equal_files
from sprawl_orch.changes.record import fs_now_ns, kind_of
from sprawl_orch.changes.workspace_diff import scan
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.core import fs_clock

_STAMP = struct.Struct("<QqqQQ")  # copy_stamps.ENTRY's halves: size, mtime, ctime, ino, dev
_MODE = struct.Struct("<Q")
_HALF = _STAMP.size  # 40: the copy half of an ENTRY starts here, its mode at 2 * _HALF
CLEAN_SOURCE = "workspace clean pairs"


def record_of(base: Path) -> copy_stamps.SyncRecord:
    """``base`` walked into the shape of its stamp record (both halves its own stamps): for
    when the record can't be trusted (none, or a sync of it was killed midway)."""
    rec = copy_stamps.SyncRecord(str(base), 0, 0)
    for rel, st in sorted(scan(base).items()):
        if stat.S_ISREG(st.st_mode):
            rec.add(rel, copy_stamps.pack(st, st, st.st_mode & 0o777))
        elif stat.S_ISLNK(st.st_mode):
            rec.links[rel] = os.readlink(base / rel)
        elif stat.S_ISDIR(st.st_mode):
            rec.dirs.append(rel)
    return rec


def new_clean() -> copy_stamps.SyncRecord:
    return copy_stamps.SyncRecord(CLEAN_SOURCE, 0, 0)


def _mode(bits: int) -> str:
    return f"{stat.S_IMODE(bits):04o}"


class _Base:
    """The base side of one comparison, read from its record."""

    def __init__(self, root: Path, rec: copy_stamps.SyncRecord) -> None:
        self.root = root
        self.rec = rec
        self.files = rec.offsets()
        self.links = rec.links
        self.dirs = set(rec.dirs)
        self._dir_modes: dict[str, int] = {}

    def file(self, rel: str) -> tuple[bytes, int, int, int]:
        """(the copy half of its entry, permission bits, size, ctime)"""
        at = self.files[rel]
        entries = self.rec.entries
        half = bytes(entries[at + _HALF : at + 2 * _HALF])
        size, _, ctime, _, _ = _STAMP.unpack(half)
        return half, _MODE.unpack_from(entries, at + 2 * _HALF)[0], size, ctime

    def kind(self, rel: str) -> str | None:
        if rel in self.files:
            return "file"
        if rel in self.links:
            return "link"
        return "dir" if rel in self.dirs else None

    def mode(self, rel: str) -> int:
        """st_mode-style bits of a base entry (the record keeps no directory's: lstat)."""
        if rel in self.files:
            return stat.S_IFREG | self.file(rel)[1]
        if rel in self.links:
            return stat.S_IFLNK | 0o777
        if rel not in self._dir_modes:
            self._dir_modes[rel] = os.lstat(self.root / rel).st_mode
        return self._dir_modes[rel]

    def size(self, rel: str) -> int | None:
        return self.file(rel)[2] if rel in self.files else None


def diff_walk(
    tree: Path,
    base_root: Path,
    base: copy_stamps.SyncRecord,
    clean: copy_stamps.SyncRecord | None,
    learn: copy_stamps.SyncRecord | None = None,
) -> list[ChangeEntry]:
    """What ``tree`` changed relative to the base (``base`` its record, ``base_root`` where it
    is), as `changes` lists it, sorted by path. ``learn``: gets every equal file pair, and
    the line (only while nothing writes ``tree``: see the module docstring)."""
    b = _Base(base_root, base)
    files, links, dirs = b.files, b.links, b.dirs
    c_at = clean.offsets() if clean is not None else {}
    c_entries = clean.entries if clean is not None else bytearray()
    line = clean.started_ns if clean is not None else 0
    size = copy_stamps.ENTRY.size
    pack, pack_mode = _STAMP.pack, _MODE.pack
    out: list[ChangeEntry] = []
    seen: set[str] = set()
    stack = [("", str(tree))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        prefix = rel_dir + "/" if rel_dir else ""
        try:
            it = os.scandir(abs_dir)
        except FileNotFoundError:
            # removed since it was listed: what was under it is gone
            continue
        with it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                rel = prefix + entry.name
                seen.add(rel)
                mode = st.st_mode
                if stat.S_ISDIR(mode):
                    stack.append((rel, entry.path))
                if stat.S_ISREG(mode) and rel in files:
                    half, bits, bsize, bctime = b.file(rel)
                    key = (
                        pack(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
                        + half
                        + pack_mode(mode)
                    )
                    at = c_at.get(rel)
                    if (
                        at is not None
                        and c_entries[at : at + size] == key
                        and max(st.st_ctime_ns, bctime) < line
                    ):
                        if learn is not None:
                            learn.add(rel, key)
                        continue
                    same_bits = mode & 0o777 == bits
                    same = (
                        st.st_size == bsize
                        # unreadable (None) counts as different: compared again, never trusted
                        and equal_files(entry.path, str(base_root / rel), follow_a=False) is True
                    )
                    if same and same_bits:
                        if learn is not None:
                            learn.add(rel, key)
                        continue
                    change = "mode_changed" if same else "modified"
                elif stat.S_ISDIR(mode) and rel in dirs:
                    was = b.mode(rel)
                    if mode & 0o777 == was & 0o777:
                        continue
                    change = "mode_changed"
                elif stat.S_ISLNK(mode) and rel in links:
                    if os.readlink(entry.path) == links[rel]:
                        continue
                    change = "modified"
                else:
                    change = "created" if b.kind(rel) is None else "kind_changed"
                out.append(_entry(rel, change, st, entry.path, b))
    for rel in (*files, *links, *dirs):
        if rel not in seen:
            out.append(_entry(rel, "deleted", None, "", b))
    if learn is not None:
        # Taken after every stamp above; 0 (trust nothing) where fs_clock does not know the
        # filesystem: there a write need not move the ctime.
        known = fs_clock.granularity_ns(os.stat(tree).st_dev) is not None
        learn.started_ns = fs_now_ns(tree.parent) if known else 0
    out.sort(key=lambda e: e.path)
    return out


def _entry(rel: str, change: str, st: os.stat_result | None, path: str, b: _Base) -> ChangeEntry:
    kind = kind_of(st.st_mode) if st is not None else None
    was_kind = b.kind(rel)
    return ChangeEntry(
        path=rel,
        change=change,  # type: ignore[arg-type]
        kind=kind,
        was_kind=was_kind,  # type: ignore[arg-type]
        mode=_mode(st.st_mode) if st is not None else None,
        was_mode=_mode(b.mode(rel)) if was_kind is not None else None,
        size=st.st_size if st is not None and kind == "file" else None,
        was_size=b.size(rel),
        target=os.readlink(path) if kind == "link" else None,
    )
