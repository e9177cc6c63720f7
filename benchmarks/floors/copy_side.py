"""The floor of a resync that trusts a memory of the copy's side (issue 26 item 4, docs/design.md
§5.1), for benchmarks/copy_sync.py's rows: sketches, not the product."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from sprawl_orch.copy import stamps as copy_stamps


def one_side_walk(src: Path) -> None:
    """The floor of a resync that trusts a memory of the copy's side: list every directory of
    the person's tree and lstat every entry in it; the copy is not touched."""
    stack = [str(src)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                entry.stat(follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)


_SOURCE_HALF = 40  # (size, mtime_ns, ctime_ns, ino, dev) of the source, first in ENTRY
_COPY_TIMES = 48  # where the copy's (mtime_ns, ctime_ns) start in ENTRY, after its size


def memory_walk_sketch(src: Path, record: copy_stamps.SyncRecord) -> int:
    """What a resync with a valid memory of the copy does per entry (a sketch, not the
    product: no bounds, no links, no excludes): one-side walk, and each regular file vouched
    for by the racy-clean rule on its source stamp against the record, the copy's recorded
    stamp standing for the copy. Returns how many files it could not vouch for (0 expected)."""
    offsets, entries = record.offsets(), record.entries
    edge = record.started_ns - record.granularity_ns
    half, times = struct.Struct("<QqqQQ"), struct.Struct("<qq")
    unsure = 0
    stack = [(str(src), "")]
    while stack:
        path, rel = stack.pop()
        prefix = rel + os.sep if rel else ""
        with os.scandir(path) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append((entry.path, prefix + entry.name))
                    continue
                at = offsets.get(prefix + entry.name)
                packed = half.pack(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
                if (
                    at is None
                    or entries[at : at + _SOURCE_HALF] != packed
                    or max(
                        st.st_mtime_ns,
                        st.st_ctime_ns,
                        *times.unpack_from(entries, at + _COPY_TIMES),
                    )
                    >= edge
                ):
                    unsure += 1
    return unsure


def vouched_by_dir(record: copy_stamps.SyncRecord) -> dict[str, dict[str, bytes]]:
    """The memory in the form a server would keep it between calls (built once, after the
    command's walk): by directory, each file's packed source stamp, only for files whose
    recorded stamps (both sides) are older than the record's start minus the margin -- so
    equality alone is the racy-clean rule."""
    edge = record.started_ns - record.granularity_ns
    entries, size = record.entries, copy_stamps.ENTRY.size
    by_dir: dict[str, dict[str, bytes]] = {}
    for i, rel in enumerate(record.paths):
        at = i * size
        v = copy_stamps.ENTRY.unpack_from(entries, at)
        if max(v[1], v[2], v[6], v[7]) < edge:
            head, _, name = rel.rpartition(os.sep)
            by_dir.setdefault(head, {})[name] = bytes(entries[at : at + _SOURCE_HALF])
    return by_dir


def memory_walk_by_dir(src: Path, by_dir: dict[str, dict[str, bytes]]) -> int:
    """memory_walk_sketch over vouched_by_dir's form: per file one lstat, one pack, one
    lookup. Returns how many files it could not vouch for (0 expected)."""
    pack = struct.Struct("<QqqQQ").pack
    unsure = 0
    stack = [(str(src), "")]
    while stack:
        path, rel = stack.pop()
        known = by_dir.get(rel, {})
        with os.scandir(path) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append((entry.path, rel + os.sep + entry.name if rel else entry.name))
                elif known.get(entry.name) != pack(
                    st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev
                ):
                    unsure += 1
    return unsure
