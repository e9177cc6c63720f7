"""A memory of a copy's side (design §5.1, issue 26 item 4): what lets a no-change resync walk
only the person's tree and trust the copy to be what the last sync left, but for the paths the
command is known to have changed.

Why a memory at all: today's resync lstat-s every copy entry and lists every copy directory
(35-40% of a no-change resync, §5.1's profile), because a command may have written the copy.
The walk after the command (the result's `changes`) already lstat-ed every copy entry; what it
saw, kept until the next lease of the slot, spares the next sync that second look. It is kept
in this by-directory form, built once (by the per-user exec server, §5.1: a record parsed per
call costs ~40 ms of 10 000 files, more than the target leaves):

- per copy directory whose ctime did not move since the record before the command (
  no entry was added, removed or renamed in it, nor its bits or times set): the kinds of its
  entries (the record's files, links and directories under it), its (inode, permission bits,
  mtime) as observed, and for each file whose record entry the racy-clean rule vouches for
  (all four timestamps older than the record's start minus the margin, both devices of a
  known margin) and that the command did not change: the source half of that entry (size,
  mtime_ns, ctime_ns, inode, device, bits) to compare one packed ``bytes``, the whole entry
  and the copy's ctime to carry into the new record;
- nothing at all when any copy file had ``st_nlink > 1`` (a hard link made inside the copy is
  a second name whose writes show under neither: §5.1).

A memory is used only through :func:`gate`: its lease token is the one the lease found (no
holder of the slot came between: copy/store.py), the copy root and the stamp record are the
same inodes with the same stamps, and the state directory notes no command of an arm that
writes the copies in place since this boot (copy/writers.py). Anything else: today's walk.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.copy.fileops import Kind
from sprawl_orch.copy.stamps import ENTRY, SyncRecord, parse
from sprawl_orch.core import fs_clock, served_memo
from sprawl_orch.core.served_memo import Json

SOURCE_HALF = struct.Struct("<QqqQQQ")
"""(size, mtime_ns, ctime_ns, inode, device, kind and bits) of a source file: what the memory
walk packs per file and compares with one ``bytes`` equality (ENTRY's first five and its bits)."""

Ident = tuple[int, int]  # (device, inode)
Vouched = tuple[bytes, bytes, int, str, int]
FileId = tuple[int, int, int, int, int]  # (device, inode, size, mtime_ns, ctime_ns)


def file_id(st: os.stat_result) -> FileId:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


DirSeen = tuple[int, int, int]  # (inode, permission bits, mtime_ns) of a copy directory


@dataclass
class Observed:
    """What a walk of the copy after the command saw (the `changes` walk fills it: changes.py
    compute; the tests' stand-in is :func:`observe`): each copy directory whose own stamp it
    found untouched since the record taken before the command, by path relative to the root
    (``""`` the root, ``os.sep``-separated); every path whose stamp was not untouched (created,
    modified, deleted, kind, bits or times changed, even where the bytes came out the same);
    and whether any file had more than one link. A directory whose ctime moved is absent from
    ``dirs``: its listing is not the record's."""

    dirs: dict[str, DirSeen] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    linked: bool = False


@dataclass
class DirMemory:
    kinds: dict[str, Kind]
    ident: int  # the copy directory's inode
    mode: int  # its permission bits
    mtime_ns: int
    # name -> (source half packed, whole record entry, copy ctime, path relative to the root,
    # size): a vouched file
    files: dict[str, Vouched] = field(default_factory=dict)
    # The same, whole, for a directory whose every vouched file matched: carried in one go.
    rels: list[str] = field(default_factory=list)
    blob: bytes = b""
    ctimes: dict[str, int] = field(default_factory=dict)
    size: int = 0

    def seal(self) -> None:
        got = self.files.values()
        self.rels = [v[3] for v in got]
        self.blob = b"".join(v[1] for v in got)
        self.ctimes = {name: v[2] for name, v in self.files.items()}
        self.size = sum(v[4] for v in got)


@dataclass
class CopyMemory:
    token: str
    root: Ident
    record_id: FileId
    record: SyncRecord  # the stamp record as loaded: the walk carries its entries forward
    dirs: dict[str, DirMemory]
    changed: frozenset[str]
    edge_ns: int  # the record's start minus its margin


def _parent(rel: str) -> tuple[str, str]:
    head, _, name = rel.rpartition(os.sep)
    return head, name


def build(
    token: str,
    root: os.stat_result,
    record: SyncRecord,
    record_stat: os.stat_result,
    seen: Observed,
) -> CopyMemory | None:
    """The by-directory form (module docstring), or None when no memory may be kept."""
    return _build(token, (root.st_dev, root.st_ino), record, file_id(record_stat), seen)


def _build(
    token: str, root: Ident, record: SyncRecord, record_id: FileId, seen: Observed
) -> CopyMemory | None:
    if seen.linked:
        return None
    edge = record.started_ns - record.granularity_ns
    dirs: dict[str, DirMemory] = {}
    for rel, (ino, mode, mtime) in seen.dirs.items():
        if rel not in seen.changed:
            dirs[rel] = DirMemory({}, ino, mode, mtime)
    timed: dict[int, bool] = {}

    def known(dev: int) -> bool:
        if dev not in timed:
            timed[dev] = fs_clock.granularity_ns(dev) is not None
        return timed[dev]

    def place(rel: str, kind: Kind) -> DirMemory | None:
        head, name = _parent(rel)
        here = dirs.get(head)
        if here is not None:
            here.kinds[name] = kind
        return here

    for rel in record.dirs:
        place(rel, "dir")
    for rel in record.links:
        place(rel, "other")
    size = ENTRY.size
    entries = record.entries
    for i, rel in enumerate(record.paths):
        here = place(rel, "file")
        if here is None or rel in seen.changed:
            continue
        whole = bytes(entries[i * size : (i + 1) * size])
        v = ENTRY.unpack(whole)
        if max(v[1], v[2], v[6], v[7]) >= edge or not (known(v[4]) and known(v[9])):
            continue  # not vouched for by the racy-clean rule: the walk compares it
        half = SOURCE_HALF.pack(v[0], v[1], v[2], v[3], v[4], stat.S_IFREG | v[10])
        here.files[_parent(rel)[1]] = (half, whole, v[7], rel, v[0])
    for here in dirs.values():
        here.seal()
    record.offsets()  # the index a walk falling back to the per-entry path looks files up in
    return CopyMemory(
        token,
        root,
        record_id,
        record,
        dirs,
        frozenset(seen.changed),
        edge,
    )


# -- kept by the exec server between calls (core/served_memo.py) --------------------------------

KIND = "copy-memory"


def value_of(token: str, root: os.stat_result, record_stat: os.stat_result, seen: Observed) -> Json:
    """The memory as JSON, what a call teaches the server (None: nothing may be kept). The
    server builds the by-directory form from it and the record file once (_decode), before
    the next call is forked: a record parsed per call does not fit the target (§5.1)."""
    if seen.linked:
        return None
    changed: list[Json] = [*sorted(seen.changed)]
    dirs: dict[str, Json] = {rel: [*v] for rel, v in seen.dirs.items()}
    return {
        "token": token,
        "root": [root.st_dev, root.st_ino],
        "record": list(file_id(record_stat)),
        "changed": changed,
        "dirs": dirs,
    }


def _decode(key: Json, value: Json) -> CopyMemory | None:
    """The by-directory form of a taught memory, the stamp record at ``key`` read through one
    fd whose identity must be the taught one; None when it is not (or the value is not ours)."""
    if not isinstance(key, str) or not isinstance(value, dict):
        return None
    try:
        fd = os.open(key, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # the record is gone: nothing to remember against
        return None
    try:
        got = file_id(os.fstat(fd))
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    except OSError:  # unreadable: no memory, today's walk
        return None
    finally:
        os.close(fd)
    try:
        if list(got) != value["record"]:
            return None
        record = parse(data)
        if record is None:
            return None
        dirs = value["dirs"]
        changed = value["changed"]
        root = value["root"]
        token = value["token"]
        assert isinstance(dirs, dict) and isinstance(changed, list) and isinstance(root, list)
        assert isinstance(token, str)
        seen = Observed(
            {str(rel): (int(v[0]), int(v[1]), int(v[2])) for rel, v in dirs.items()},  # type: ignore[index, arg-type]
            {str(p) for p in changed},
        )
        return _build(token, (int(root[0]), int(root[1])), record, got, seen)  # type: ignore[arg-type]
    except (AssertionError, KeyError, IndexError, TypeError, ValueError, struct.error):
        return None  # not a memory this version taught


served_memo.decoder(KIND, _decode)


def recall(key: str) -> CopyMemory | None:
    """The memory kept for the slot whose stamp record is at ``key`` (the server decoded it
    before this call was forked), forgotten here and -- when this call ends -- in the server:
    a memory is used at most once, and a call killed midway leaves none (§5.1)."""
    got = served_memo.recall_decoded(KIND, key)
    served_memo.learn(KIND, key, None)
    return got if isinstance(got, CopyMemory) else None


def keep(key: str, value: Json) -> None:
    """Teach the server the memory of the slot at ``key`` (value_of), for the next lease."""
    served_memo.learn(KIND, key, value)


def gate(
    memory: CopyMemory | None,
    token: str | None,
    copy_root: Path,
    record_path: Path,
    writers_ran: bool,
) -> CopyMemory | None:
    """``memory`` if this lease may trust it (module docstring), else None."""
    if memory is None or token is None or memory.token != token or writers_ran:
        return None
    try:
        root = os.lstat(copy_root)
        rec = os.stat(record_path)
    except OSError:  # the copy or its record is gone: nothing to trust, today's walk decides
        return None
    if not stat.S_ISDIR(root.st_mode) or (root.st_dev, root.st_ino) != memory.root:
        return None
    if file_id(rec) != memory.record_id:
        return None
    return memory


def observe(
    root: Path, before: dict[str, tuple[int, ...]], line_ns: int
) -> tuple[Observed, dict[str, tuple[int, ...]]]:
    """A full lstat walk of the copy, compared with ``before`` (an earlier walk's stamps by path,
    (mode, size, mtime_ns, ctime_ns, inode) per entry): the Observed of the module docstring,
    and this walk's stamps. ``line_ns``: the filesystem's "now" taken after ``before``
    (changes.record.fs_now_ns); an entry whose ctime is not below it changed, whatever its
    stamps say (a write in the same tick as ``before`` keeps a coarse ctime). A stand-in for
    the `changes` walk, which sees all this already (tests, benchmarks)."""
    now: dict[str, tuple[int, ...]] = {}
    dirs: dict[str, os.stat_result] = {}
    linked = False
    pending = [""]
    while pending:
        rel = pending.pop()
        path = os.path.join(root, rel) if rel else str(root)
        st = os.lstat(path)
        dirs[rel] = st
        now[rel] = (st.st_mode, 0, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        with os.scandir(path) as it:
            for entry in it:
                sub = rel + os.sep + entry.name if rel else entry.name
                est = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(est.st_mode):
                    pending.append(sub)
                    continue
                linked |= stat.S_ISREG(est.st_mode) and est.st_nlink > 1
                now[sub] = (est.st_mode, est.st_size, est.st_mtime_ns, est.st_ctime_ns, est.st_ino)
    racy = {rel for rel, v in now.items() if v[3] >= line_ns}
    changed = set(_differ(before, now) | racy)
    kept = {
        rel: (st.st_ino, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
        for rel, st in dirs.items()
        if rel not in changed
    }
    return Observed(kept, changed, linked), now


def _differ(a: dict[str, tuple[int, ...]], b: dict[str, tuple[int, ...]]) -> frozenset[str]:
    names: Iterable[str] = set(a) | set(b)
    return frozenset(p for p in names if a.get(p) != b.get(p))
