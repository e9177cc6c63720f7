"""The cost of `changes` for a command that changed nothing, against a metadata-only walk of
the same copy, interleaved in one run (issue #18: must be <= 1.3x).

    python benchmarks/changes_walk.py [--files N] [--reps R]

Builds a tree of N files (default 10 000 of 4 KiB in ~100 directories), syncs it into a copy
with ``copy_sync.sync_with_record``, records the copy as the exec tool does before a command
(``change_record.finish``), then measures R alternating repetitions of:

- raw: a metadata-only walk of the copy (``os.scandir`` + ``lstat`` of every entry, the floor
  any stamp comparison must pay);
- ours: ``changes.compute`` on the unchanged copy (the same walk plus the stamp compare, and
  a byte comparison of any entry whose stamp is racy).

Prints each median in ms, the ratio of the medians and the median of the per-rep ratios
(each rep's two walks run back to back, so the paired ratio is the steadier number on a
loaded machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch import change_record
from sprawl_orch.changes import compute
from sprawl_orch.copy_sync import sync_with_record


def build_tree(root: Path, files: int, size: int) -> None:
    dirs = max(1, files // 100)
    for i in range(files):
        d = root / f"d{i % dirs:03d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:06d}.txt").write_bytes(os.urandom(size))


def metadata_walk(root: Path) -> int:
    n = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                n += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                del st
    return n


def timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=31)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-changes-") as tmp:
        source, copy = Path(tmp) / "source", Path(tmp) / "copy"
        source.mkdir()
        build_tree(source, args.files, args.size)
        _, synced = sync_with_record(source, copy)
        stamps, line = change_record.source_from_sync(synced, source)
        record = change_record.finish(copy, stamps, line)
        entries = dict(record.entries())
        racy = sum(1 for s in entries.values() if not record.copy_trusted(s))
        raw_ms: list[float] = []
        ours_ms: list[float] = []
        for rep in range(args.reps):
            # Alternate which goes first, so neither always meets the caches the other warmed.
            if rep % 2:
                raw_ms.append(timed(lambda: metadata_walk(copy)))
            start = time.perf_counter()
            found = compute(record, source, copy)
            ours_ms.append((time.perf_counter() - start) * 1000)
            assert found == [], f"a no-change copy reported changes: {found[:3]}"
            if not rep % 2:
                raw_ms.append(timed(lambda: metadata_walk(copy)))
        raw, ours = statistics.median(raw_ms), statistics.median(ours_ms)
        print(f"copy of {args.files} files in {len(entries) - args.files} directories; "
              f"{racy} entries with a racy stamp (compared by bytes); {args.reps} reps, "
              "interleaved")
        print(f"{'metadata-only walk (scandir + lstat)':44} {raw:9.1f} ms")
        print(f"{'changes.compute, no change':44} {ours:9.1f} ms")
        pairs = statistics.median(o / r for o, r in zip(ours_ms, raw_ms, strict=True))
        print(f"ratio ours / raw: {ours / raw:.2f}x of the medians, {pairs:.2f}x median of "
              "the paired reps (bound 1.3x)")


if __name__ == "__main__":
    main()
