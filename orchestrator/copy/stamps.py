"""The stamp record of a synced copy: what the last sync saw, kept beside the copy (design §5).

A sync may skip comparing a source file's bytes with its copy only by git's rule against the
"racy clean" problem (git's Documentation/technical/racy-git.txt): it trusts a recorded
(size, mtime_ns, ctime_ns, inode, device) of BOTH the source file and its copy only when all
four timestamps are older than the start of the sync that recorded them by more than the
filesystems' timestamp granularity. Why that is exact:

- the record says: after ``started_ns``, the source had stamp ``a``, the copy had stamp ``b``,
  and their bytes and permission bits were equal;
- any later write, truncate, chmod, rename-over or ``utime`` of either file sets its ctime to
  "now", which no unprivileged process can set back (only changing the system clock can);
- "now" is after ``started_ns``; a filesystem stamps with a coarse clock that lags the real one
  by less than ``granularity_ns``, so a later ctime is >= ``started_ns - granularity_ns`` while
  a trusted one is < that: equal stamps mean no change. A stamp too close to ``started_ns``
  (the file changed during or just before that sync) is not trusted; its bytes are compared,
  and the next sync records it again with its own, later, start.

The record is written to a temporary name and renamed over the old one, and ends with a
SHA-256 digest of everything before it: a missing, torn or foreign record loads as ``None``
(compare bytes). A sync killed midway leaves the previous record, which is still sound: every
copy file the killed sync replaced is a new inode, so its stamp no longer matches.

The file is binary because JSON of 10 000 entries takes ~70 ms each way, more than the whole
walk the record exists to make cheap. Layout: ``MAGIC``, then length-prefixed (u64 little
endian) sections: header JSON, file paths, file entries (``ENTRY``, 88 bytes each, in path
order), link paths and targets, directory paths; then the 32-byte digest. Paths are relative
to the copy's root, ``os.sep``-separated, NUL-joined, encoded as ``os.fsencode`` does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from sprawl_orch.core import fs_clock

# 3: entries are only recorded for copies holding the source's mtime (issue 23); a version-2
# record vouches for copies whose mtime was the sync's "now", so it must not load.
# 4: the digest is SHA-256 (was BLAKE2b): every CLI call loads the record (~1 MB for 10 000
# files) and every first sync writes it, and BLAKE2b took 13-34 ms per MB here against 2 ms for
# SHA-256 (OpenSSL's, with the CPU's SHA instructions) -- 5-15% of a no-change resync. Either
# finds a torn or corrupt record; a version-3 record fails the magic and is not trusted.
# 5: the slot's lock file carries a lease token (copy/store.py) that a memory of the copy's side
# is checked against (design §5.1); an older sprawl-orch writes none, so it must not load this
# record: it syncs in full and writes its own (a new inode), which voids any memory through the
# record's identity (copy/memory.py gate).
MAGIC = b"SPRSTMP5"
_U64 = struct.Struct("<Q")
_DIGEST = 32


def _digest(body: bytes | bytearray) -> bytes:
    return hashlib.sha256(body).digest()


ENTRY = struct.Struct("<QqqQQQqqQQQ")
"""One file: source (size, mtime_ns, ctime_ns, ino, dev), copy (the same five), permission bits.
Packed, so that a sync compares a file's current stamps with one ``bytes`` equality."""

Stamp = tuple[int, int, int, int, int]
"""(size, mtime_ns, ctime_ns, inode, device) of one file, links not followed on the copy side."""


def stamp_of(st: os.stat_result) -> Stamp:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def pack(st: os.stat_result, cst: os.stat_result, mode: int) -> bytes:
    """The packed entry for a source file ``st`` and its copy ``cst`` (both already stat-ed)."""
    return ENTRY.pack(
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
        st.st_dev,
        cst.st_size,
        cst.st_mtime_ns,
        cst.st_ctime_ns,
        cst.st_ino,
        cst.st_dev,
        mode,
    )


def newest(st: os.stat_result, cst: os.stat_result) -> int:
    """The newest of the four timestamps the racy-clean rule looks at."""
    return max(st.st_mtime_ns, st.st_ctime_ns, cst.st_mtime_ns, cst.st_ctime_ns)


class FileStamps(NamedTuple):
    source: Stamp
    copy: Stamp
    mode: int


@dataclass
class SyncRecord:
    """What one sync left (see the module docstring for why it can be trusted):

    - ``started_ns``: ``time.time_ns()`` when that sync started; ``granularity_ns``: the margin;
    - ``paths[i]`` / ``entries[i*ENTRY.size:…]``: every regular file whose copy equalled its
      source (bytes and permission bits) after ``started_ns``, with both stamps (``file(rel)``
      decodes one; ``files()`` all);
    - ``links[rel] = target``: every link copied as a link; ``dirs``: every directory;
    - ``excluded``: the ``[sandbox.copy] exclude`` patterns that sync left out.
    """

    source: str
    started_ns: int
    granularity_ns: int
    excluded: tuple[str, ...] = ()
    paths: list[str] = field(default_factory=list)
    entries: bytearray = field(default_factory=bytearray)
    links: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    total_bytes: int = 0  # in the regular files
    # Kept in memory by the sync that made this record, never saved (None on a loaded one):
    # each copy file's ctime as the record holds it, by directory ("" the root) and name, so
    # `changes` builds on this sync instead of walking the copy again (change_record); and
    # the files whose source ctime is not below this sync's ``started_ns - granularity_ns``.
    copy_ctimes: dict[str, dict[str, int]] | None = None
    recent: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._index: dict[str, int] | None = None

    def add(self, rel: str, packed: bytes) -> None:
        self.paths.append(rel)
        self.entries += packed

    def offsets(self) -> dict[str, int]:
        """Where each path's entry starts in ``entries``."""
        if self._index is None:
            size = ENTRY.size
            self._index = {p: i * size for i, p in enumerate(self.paths)}
        return self._index

    def offset(self, rel: str) -> int | None:
        return self.offsets().get(rel)

    def file(self, rel: str) -> FileStamps | None:
        at = self.offset(rel)
        if at is None:
            return None
        v = ENTRY.unpack_from(self.entries, at)
        return FileStamps(v[0:5], v[5:10], v[10])

    def files(self) -> dict[str, FileStamps]:
        return {rel: f for rel in self.paths if (f := self.file(rel)) is not None}

    def trusted_packed(self, rel: str, packed: bytes, newest_ns: int) -> bool:
        """The racy-clean rule on a packed current entry: equal to the recorded one, and the
        newest of its four timestamps (``newest_ns``) older than the start minus the margin."""
        at = self.offset(rel)
        if at is None or newest_ns >= self.started_ns - self.granularity_ns:
            return False
        return self.entries[at : at + ENTRY.size] == packed

    def trusted(self, rel: str, source: os.stat_result, copy: os.stat_result, mode: int) -> bool:
        """True when the racy-clean rule lets a comparison of ``rel``'s bytes be skipped."""
        return self.trusted_packed(rel, pack(source, copy, mode), newest(source, copy))


def usable(record: SyncRecord | None, source: str, excluded: tuple[str, ...]) -> SyncRecord | None:
    """``record`` if a new sync of ``source`` may use it: same source and excludes, the margin
    this sync would use, and a clock that has not gone back past its start."""
    if record is None or record.source != source or record.excluded != excluded:
        return None
    if time.time_ns() < record.started_ns or record.granularity_ns < fs_clock.TICK_MARGIN_NS:
        return None
    return record


def _join(paths: Iterable[str]) -> bytes:
    return "\0".join(paths).encode("utf-8", "surrogateescape")  # os.fsencode, all at once


def _split(blob: bytes) -> list[str]:
    return blob.decode("utf-8", "surrogateescape").split("\0") if blob else []


def dump(record: SyncRecord) -> bytes:
    header = {
        "source": record.source,
        "started_ns": record.started_ns,
        "granularity_ns": record.granularity_ns,
        "excluded": list(record.excluded),
        "total_bytes": record.total_bytes,
    }
    out = bytearray(MAGIC)
    for section in (
        json.dumps(header).encode(),
        _join(record.paths),
        bytes(record.entries),
        _join(p for pair in record.links.items() for p in pair),
        _join(record.dirs),
    ):
        out += _U64.pack(len(section))
        out += section
    out += _digest(out)
    return bytes(out)


def parse(data: bytes) -> SyncRecord | None:
    """The record in ``data``, or None if it is torn, foreign or corrupt."""
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if not body.startswith(MAGIC) or _digest(body) != digest:
        return None
    sections: list[bytes] = []
    at = len(MAGIC)
    while at < len(body):
        (size,) = _U64.unpack_from(body, at)
        sections.append(body[at + 8 : at + 8 + size])
        at += 8 + size
    if len(sections) != 5:
        return None
    header = json.loads(sections[0])
    paths = _split(sections[1])
    if len(sections[2]) != ENTRY.size * len(paths):
        return None
    pairs = _split(sections[3])
    return SyncRecord(
        source=header["source"],
        started_ns=header["started_ns"],
        granularity_ns=header["granularity_ns"],
        excluded=tuple(header["excluded"]),
        paths=paths,
        entries=bytearray(sections[2]),
        links=dict(zip(pairs[::2], pairs[1::2], strict=True)),
        dirs=_split(sections[4]),
        total_bytes=header.get("total_bytes", 0),
    )


def load(path: Path) -> SyncRecord | None:
    """The record at ``path``; None when absent, unreadable, torn or corrupt (compare bytes)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return parse(data)
    except (ValueError, KeyError, TypeError, struct.error):
        return None


def save(record: SyncRecord, path: Path) -> None:
    """Write ``record`` to ``path`` atomically (temporary name, then rename over)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(dump(record))
    os.replace(tmp, path)


def forget(path: Path) -> None:
    """Remove the record (the copy it describes is being deleted)."""
    for p in (path, path.with_name(path.name + ".tmp")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
