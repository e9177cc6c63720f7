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

Bytes are only skipped by the racy-clean rule (copy/stamps.py): :class:`Clean` holds, for
each tree file found equal to its base file, the tree file's stamp (ctime, mtime, size,
inode, device, st_mode) and a line taken from the filesystem's clock after the walk that
found them. Any later write, chmod, utime or rename of the tree file sets a ctime at or past
that line, which no command can set back. A walk only records (``learn``) while none of the
workspace's commands runs, so nothing writes ``tree`` between the stamps and the line. The
base side of a pair changes only by the base sync, which names every path it writes
(workspace_flow.py): :meth:`Clean.forget` drops those pairs before the flow-in ends.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from array import array
from collections.abc import Iterable
from pathlib import Path

from sprawl_orch.changes.changes import ChangeEntry, equal_files
from sprawl_orch.changes.record import fs_now_ns, kind_of
from sprawl_orch.changes.workspace_diff import scan
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.core import fs_clock

_MODE = struct.Struct("<Q")
_HALF = 40  # copy_stamps.ENTRY: the copy half (size, mtime, ctime, ino, dev) starts here,
# its permission bits at twice that
_MAGIC = b"SPRCLEAN2"
_DIGEST = 32
_REG, _DIR, _LNK, _FMT = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK, 0o170000
TreeStamp = tuple[int, int, int]  # ctime, inode, device


class Clean:
    """Tree files found equal to their base files, by stamp, trusted below ``line``; by
    directory, then name (as the walk meets them). The stamp is (ctime, inode, device), as
    `changes` (changes.py) trusts a copy's: every write, truncate, chmod, chown or utime of
    an inode sets its ctime to now, which no command can set back, so size and mtime add
    nothing once the ctime is below the line."""

    def __init__(self, pairs: dict[str, dict[str, TreeStamp]] | None = None, line: int = 0):
        self.pairs = pairs if pairs is not None else {}
        self.line = line
        self.dirty = True  # say something a saved one does not (diff_walk: learned anew)

    def forget(self, paths: Iterable[str]) -> bool:
        """Drop the pairs of ``paths`` and of everything under them; whether any went."""
        gone = False
        for rel in paths:
            parent, _, name = rel.rpartition("/")
            gone |= self.pairs.get(parent, {}).pop(name, None) is not None
            for d in [d for d in self.pairs if d == rel or d.startswith(rel + "/")]:
                gone |= bool(self.pairs.pop(d))
        return gone

    def dump(self) -> bytes:
        paths: list[str] = []
        nums = array("Q")
        for d, names in self.pairs.items():
            prefix = d + "/" if d else ""
            for name, stamp in names.items():
                if stamp[0] >= 0:  # a ctime before 1970 (a clock set back) is not kept
                    paths.append(prefix + name)
                    nums.extend(stamp)
        blob = "\0".join(paths).encode("utf-8", "surrogateescape")
        out = bytearray(_MAGIC)
        out += struct.pack("<qQQ", self.line, len(paths), len(blob))
        out += blob
        out += nums.tobytes()
        out += hashlib.blake2b(out, digest_size=_DIGEST).digest()
        return bytes(out)

    @classmethod
    def load(cls, path: Path) -> Clean:
        """The pairs saved at ``path``; none when absent, torn or foreign (compare bytes)."""
        try:
            data = path.read_bytes()
            body, digest = data[:-_DIGEST], data[-_DIGEST:]
            if not body.startswith(_MAGIC):
                return cls()
            if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
                return cls()
            line, count, size = struct.unpack_from("<qQQ", body, len(_MAGIC))
            at = len(_MAGIC) + 24
            blob = body[at : at + size]
            paths = blob.decode("utf-8", "surrogateescape").split("\0") if count else []
            nums = array("Q")
            nums.frombytes(body[at + size :])
        except (OSError, ValueError, struct.error):
            # no record, or not one of ours: every file is compared by bytes
            return cls()
        if len(paths) != count or len(nums) != 3 * count:
            return cls()
        pairs: dict[str, dict[str, TreeStamp]] = {}
        it = iter(nums)
        for rel, stamp in zip(paths, zip(it, it, it, strict=True), strict=True):
            parent, _, name = rel.rpartition("/")
            pairs.setdefault(parent, {})[name] = stamp
        return cls(pairs, line)

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.dump())
        os.replace(tmp, path)


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

    def file(self, rel: str) -> tuple[int, int]:
        """(permission bits, size) of a base file"""
        at = self.files[rel]
        entries = self.rec.entries
        return _MODE.unpack_from(entries, at + 2 * _HALF)[0], _MODE.unpack_from(
            entries, at + _HALF
        )[0]

    def kind(self, rel: str) -> str | None:
        if rel in self.files:
            return "file"
        if rel in self.links:
            return "link"
        return "dir" if rel in self.dirs else None

    def mode(self, rel: str) -> int:
        """st_mode-style bits of a base entry (the record keeps no directory's: lstat)."""
        if rel in self.files:
            return stat.S_IFREG | self.file(rel)[0]
        if rel in self.links:
            return stat.S_IFLNK | 0o777
        if rel not in self._dir_modes:
            self._dir_modes[rel] = os.lstat(self.root / rel).st_mode
        return self._dir_modes[rel]

    def size(self, rel: str) -> int | None:
        return self.file(rel)[1] if rel in self.files else None


def diff_walk(
    tree: Path,
    base_root: Path,
    base: copy_stamps.SyncRecord,
    clean: Clean,
    learn: Clean | None = None,
) -> list[ChangeEntry]:
    """What ``tree`` changed relative to the base (``base`` its record, ``base_root`` where it
    is), as `changes` lists it, sorted by path. ``learn``: gets every equal file pair, and
    the line (only while nothing writes ``tree``: see the module docstring)."""
    b = _Base(base_root, base)
    files, links, dirs = b.files, b.links, b.dirs
    pairs, line = clean.pairs, clean.line
    none: dict[str, TreeStamp] = {}
    out: list[ChangeEntry] = []
    listed: dict[str, list[str]] = {}
    matched = compared = 0
    stack = [("", str(tree))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        prefix = rel_dir + "/" if rel_dir else ""
        known = pairs.get(rel_dir, none)
        here: dict[str, TreeStamp] | None = None
        if learn is not None:
            here = learn.pairs[rel_dir] = {}
        names = listed[rel_dir] = []
        try:
            it = os.scandir(abs_dir)
        except FileNotFoundError:
            # removed since it was listed: what was under it is gone
            continue
        with it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                name = entry.name
                names.append(name)
                kind = st.st_mode & _FMT
                if kind == _REG:
                    # The hot path of a command that changed little: a file the clean pairs
                    # vouch for (the base's side only changes by a sync, which forgets them).
                    now = (st.st_ctime_ns, st.st_ino, st.st_dev)
                    if now[0] < line and known.get(name) == now:
                        matched += 1
                        if here is not None:
                            here[name] = now
                        continue
                rel = prefix + name
                if kind == _REG and rel in files:
                    matched += 1
                    bits, bsize = b.file(rel)
                    same = (
                        st.st_size == bsize
                        # unreadable (None): different, compared again, never trusted
                        and equal_files(entry.path, str(base_root / rel), follow_a=False) is True
                    )
                    if same and st.st_mode & 0o777 == bits:
                        if here is not None:
                            here[name] = (st.st_ctime_ns, st.st_ino, st.st_dev)
                            compared += 1
                        continue
                    out.append(_entry(rel, "mode_changed" if same else "modified", st, "", b))
                    continue
                if kind == _DIR:
                    stack.append((rel, entry.path))
                    if rel in dirs:
                        matched += 1
                        if st.st_mode & 0o777 != b.mode(rel) & 0o777:
                            out.append(_entry(rel, "mode_changed", st, "", b))
                        continue
                elif kind == _LNK and rel in links:
                    matched += 1
                    if os.readlink(entry.path) != links[rel]:
                        out.append(_entry(rel, "modified", st, entry.path, b))
                    continue
                was = b.kind(rel)
                matched += was is not None
                change = "created" if was is None else "kind_changed"
                out.append(_entry(rel, change, st, entry.path, b))
    if matched != len(files) + len(links) + len(dirs):  # some base entries are gone
        seen = {d + "/" + n if d else n for d, names in listed.items() for n in names}
        gone = [r for r in (*files, *links, *dirs) if r not in seen]
        out.extend(_entry(r, "deleted", None, "", b) for r in gone)
    if learn is not None and not compared and _count(learn) == _count(clean):
        # Every pair learned was vouched for: the old ones, under the old line, hold as saved.
        learn.line, learn.dirty = clean.line, False
    elif learn is not None:
        # Taken after every stamp above; 0 (trust nothing) where fs_clock does not know the
        # filesystem: there a write need not move the ctime.
        known_fs = fs_clock.granularity_ns(os.stat(tree).st_dev) is not None
        learn.line = fs_now_ns(tree.parent) if known_fs else 0
    out.sort(key=lambda e: e.path)
    return out


def _count(clean: Clean) -> int:
    return sum(map(len, clean.pairs.values()))


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
