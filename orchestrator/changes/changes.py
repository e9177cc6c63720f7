"""What a command changed in its copy (design §5): computed right after it ends, from the record
of what the sync left (change_record.SyncRecord).

One walk of the copy (lstat, links never followed), every directory listed (a directory's
own stamps say nothing of its entries' bytes, so none is skipped). An entry whose inode,
device and ctime equal its recorded ones, with that ctime below the record's trusted line, is
unchanged without reading it: every write, truncate, chmod, chown, link count change or
utime sets the ctime to the filesystem's now, at least that line, and a rename or a new entry
under the name brings another inode (change_record). Otherwise, for a regular file of the same
size, the bytes decide: against the copy's hash taken after the sync when there is one, else
against the source when the source's stamp is trusted and still the one recorded before the
sync; failing both, the file is reported
``modified`` with ``verified: false`` (it may hold the same bytes). A file whose bytes are
equal but whose permission bits differ is ``mode_changed``; a path whose kind differs (file,
dir, link, other) is ``kind_changed``. Ownership and times are not changes.

Paths are relative to the working directory, "/"-separated, parents before children.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_serializer

from sprawl_orch.changes.record import (
    Kind,
    Stamp,
    SyncRecord,
    kind_of,
    mounts_inside,
    norm_mode,
    sha256_of,
    stamp_of,
)
from sprawl_orch.copy.fileops import CHUNK
from sprawl_orch.copy.memory import Observed
from sprawl_orch.core.beneath import open_file

ChangeType = Literal["created", "modified", "deleted", "kind_changed", "mode_changed"]
# Paths shown in a result; the rest are in the file named by `full` (the way back).
SHOWN = 50


class ChangeEntry(BaseModel):
    """One changed path. ``kind``/``mode``/``size`` are the copy's now, ``was_*`` at the sync."""

    model_config = ConfigDict(frozen=True)
    path: str
    change: ChangeType
    kind: Kind | None = None
    was_kind: Kind | None = None
    mode: str | None = None
    was_mode: str | None = None
    size: int | None = None
    was_size: int | None = None
    target: str | None = None  # a link's target
    verified: bool = True  # False: the stamp changed and the bytes could not be compared
    # Why the path is protected (protected.py): apply holds it until a person names it
    protected: str | None = None

    @field_serializer("path", "target", when_used="json")
    def _shown(self, name: str | None) -> str | None:
        return shown(name)


def shown(name: str | None) -> str | None:
    """A file name for JSON: bytes that are not UTF-8 (kept by os.fsdecode as surrogates, which
    no JSON encoder takes) shown as backslash escapes. The store keeps the real name."""
    if name is None:
        return None
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class Changes(BaseModel):
    """The `changes` key of a result (design §5, §10)."""

    model_config = ConfigDict(frozen=True)
    handle: str | None = None  # what `apply` takes
    created: int = 0
    modified: int = 0
    deleted: int = 0
    kind_changed: int = 0
    mode_changed: int = 0
    bytes_new: int = 0  # bytes of files created or modified (their new size)
    bytes_old: int = 0  # bytes of files deleted or replaced (their size at the sync)
    total: int = 0
    paths: list[ChangeEntry] = []
    cut: bool = False  # paths holds the first SHOWN of `total`
    full: str | None = None  # the complete list on disk
    kept: bool = False  # the changed files are kept for `apply`
    note: str | None = None  # why not kept, or which older changes were dropped
    dropped: list[str] = []  # handles whose kept changes were dropped for this one
    protected: int = 0  # paths marked protected (held by apply until a person names them)
    # changes under a `.git` that are repository state (objects, refs, index, logs): counted
    # here, not listed, never applied
    vcs_state: int = 0

    @field_serializer("note", when_used="json")
    def _shown(self, note: str | None) -> str | None:
        return shown(note)

    @classmethod
    def of(cls, entries: list[ChangeEntry], **fields: Any) -> Changes:
        counts = {c: 0 for c in ("created", "modified", "deleted", "kind_changed", "mode_changed")}
        new = old = 0
        for e in entries:
            counts[e.change] += 1
            if e.kind == "file" and e.change != "mode_changed":
                new += e.size or 0
            if e.was_kind == "file" and e.change != "mode_changed":
                old += e.was_size or 0
        return cls.model_validate(
            {
                "protected": sum(1 for e in entries if e.protected),
                **counts,
                "bytes_new": new,
                "bytes_old": old,
                "total": len(entries),
                "paths": entries[:SHOWN],
                "cut": len(entries) > SHOWN,
                **fields,
            }
        )


def _mode(st_mode: int) -> str:
    return f"{stat.S_IMODE(st_mode):04o}"


@dataclass
class _Compare:
    record: SyncRecord
    workdir: Path
    copy: Path

    def same_bytes(self, rel: str, path: str, size: int) -> bool | None:
        """Whether the copy file holds the bytes it had after the sync; None: unknowable."""
        digest = self.record.hashes.get(rel)
        if digest is not None:
            return sha256_of(path) == digest
        src = self.record.source(rel)
        if src is None or not self.record.source_trusted(src):
            return None
        source = self.workdir / rel
        try:
            now = os.stat(source)
        except OSError:
            return None
        if (
            norm_mode(now.st_mode),
            now.st_size,
            now.st_mtime_ns,
            now.st_ctime_ns,
            now.st_ino,
            now.st_dev,
        ) != src or now.st_size != size:
            return None
        return equal_files(str(source), path)


def equal_files(a: str, b: str, follow_a: bool = True) -> bool | None:
    """Whether files `a` and `b` hold the same bytes; None when either can't be opened.
    `b` is never followed through a link (a copy side); `a` is unless `follow_a` is off."""
    try:
        fa = os.open(a, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK) if follow_a else open_file(a)
    except OSError:
        return None
    try:
        fb = open_file(b)
    except OSError:
        os.close(fa)
        return None
    try:
        while True:
            x, y = os.read(fa, CHUNK), os.read(fb, CHUNK)
            if x != y:
                return False
            if not x:
                return True
    finally:
        os.close(fa)
        os.close(fb)


def compute(
    record: SyncRecord, workdir: Path, copy: Path, seen: Observed | None = None
) -> list[ChangeEntry]:
    """Every change the command made in ``copy`` since the sync recorded in ``record``.
    ``seen``: filled with what this walk saw of the copy, for a memory of it (copy/memory.py,
    design §5.1): this walk lstat-s every copy entry, the next sync need not do it again."""
    cmp = _Compare(record, workdir, copy)
    out: list[ChangeEntry] = []
    seen_dirs: set[str] = set()
    line = record.trusted_below_ns
    # A mount inside the copy (or a platform where that cannot be known): devices compared
    # too, and no directory's bindings vouched for by its stamp.
    strict = line == 0 or mounts_inside(copy) is not False
    ctimes = record.ctimes
    none: dict[str, int] = {}
    root = None if record.root is None else stamp_of(record.root)
    top = os.lstat(copy)
    stack = [("", str(copy), _untouched(top, root, line, strict), top)]
    linked = False
    while stack:
        rel_dir, abs_dir, bound, dst = stack.pop()
        seen_dirs.add(rel_dir)
        if seen is not None:
            if bound:
                seen.dirs[rel_dir] = (dst.st_ino, stat.S_IMODE(dst.st_mode), dst.st_mtime_ns)
            else:
                seen.changed.add(rel_dir)
        recorded = ctimes.get(rel_dir, none)
        prefix = rel_dir + "/" if rel_dir else ""
        # In a directory whose own inode is untouched (``bound``) every name still holds the
        # inode it held: adding, removing or renaming an entry sets the directory's ctime
        # (POSIX requires it of link, unlink, rename, mkdir, rmdir, creat). Then an entry's
        # ctime alone says whether that inode changed (-1, never equal: look closer).
        get = recorded.get if bound and not strict else none.get
        matched = 0
        rest: list[tuple[os.DirEntry[str], os.stat_result]] = []
        with os.scandir(abs_dir) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    linked = True  # a second name a write could come through (§5.1)
                if get(entry.name) == st.st_ctime_ns:
                    matched += 1
                    continue
                rest.append((entry, st))
        for entry, st in rest:
            was = record.was(rel_dir, entry.name)
            matched += entry.name in recorded
            same = _untouched(st, was, line, strict)
            if stat.S_ISDIR(st.st_mode):
                stack.append((prefix + entry.name, entry.path, same, st))
            elif not same and seen is not None:
                seen.changed.add(prefix + entry.name)
            if not same:
                change = _judge(cmp, prefix + entry.name, entry.path, st, was)
                if change is not None:
                    out.append(change)
        if matched != len(recorded):  # some recorded names are gone: list the directory again
            here = set(os.listdir(abs_dir))
            out.extend(
                _deleted(prefix + n, record.was(rel_dir, n)) for n in recorded if n not in here
            )
    for rel_dir, names in ctimes.items():  # directories gone (or no longer dirs)
        if rel_dir not in seen_dirs:
            prefix = rel_dir + "/" if rel_dir else ""
            out.extend(_deleted(prefix + n, record.was(rel_dir, n)) for n in names)
    out.sort(key=lambda e: e.path.split("/"))
    if seen is not None:
        # Paths are "/"-separated here and os.sep-separated in the memory: one on the
        # platforms that have one (it needs directory fds, copy/sync.py).
        seen.changed.update(e.path for e in out)
        seen.linked = linked
    return out


def _untouched(st: os.stat_result, was: Stamp | None, line: int, strict: bool) -> bool:
    """The same inode as recorded, with the same ctime, below the trusted line (change_record):
    nothing changed it since. The device too when something is mounted inside the copy."""
    return (
        was is not None
        and st.st_ino == was[4]
        and st.st_ctime_ns == was[3] < line
        and (not strict or st.st_dev == was[5])
    )


def _deleted(rel: str, was: Stamp | None) -> ChangeEntry:
    if was is None:  # recorded by name only (the sync's record lost it): still gone
        return ChangeEntry(path=rel, change="deleted")
    return ChangeEntry(
        path=rel,
        change="deleted",
        was_kind=kind_of(was[0]),
        was_mode=_mode(was[0]),
        was_size=_size(was),
    )


def _size(stamp: Stamp) -> int | None:
    return stamp[1] if stat.S_ISREG(stamp[0]) else None


def _judge(
    cmp: _Compare, rel: str, path: str, st: os.stat_result, was: Stamp | None
) -> ChangeEntry | None:
    now = stamp_of(st)
    kind = kind_of(now[0])
    target = os.readlink(path) if kind == "link" else None
    fields = {
        "path": rel,
        "kind": kind,
        "mode": _mode(now[0]),
        "size": _size(now),
        "target": target,
    }
    if was is None:
        return ChangeEntry(change="created", **fields)  # type: ignore[arg-type]
    before = {"was_kind": kind_of(was[0]), "was_mode": _mode(was[0]), "was_size": _size(was)}
    if kind != before["was_kind"]:
        return ChangeEntry(change="kind_changed", **fields, **before)  # type: ignore[arg-type]
    mode_same = stat.S_IMODE(now[0]) == stat.S_IMODE(was[0])
    if kind == "file":
        same: bool | None = False
        if now[1] == was[1]:
            same = cmp.same_bytes(rel, path, now[1])
        if same:
            return None if mode_same else ChangeEntry(change="mode_changed", **fields, **before)  # type: ignore[arg-type]
        return ChangeEntry(change="modified", verified=same is not None, **fields, **before)  # type: ignore[arg-type]
    if kind == "link":
        if target != cmp.record.targets.get(rel):
            return ChangeEntry(change="modified", **fields, **before)  # type: ignore[arg-type]
        return None
    return None if mode_same else ChangeEntry(change="mode_changed", **fields, **before)  # type: ignore[arg-type]
