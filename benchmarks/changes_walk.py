"""The whole cost of `changes` for a command that changed nothing, against a metadata-only walk
of the same copy, interleaved in one run (issue #18: must be <= 1.3x).

    python benchmarks/changes_walk.py [--files N] [--reps R]

Builds a tree of N files (default 10 000 of 4 KiB in ~100 directories) and syncs it into a
copy with ``copy_sync.sync_with_record``. Each repetition resyncs the copy (untimed: the exec
tool syncs before every command anyway) and then measures, back to back, in alternating order:

- raw: a metadata-only walk of the copy (``os.scandir`` + ``lstat`` of every entry, the floor
  any stamp comparison must pay);
- ours: everything the exec tool does for `changes` around a command (exec_tool's
  ``_changes_hook``): ``change_record.finish`` right after the sync (the record the command
  is compared with, built on the sync's own stamps), then ``changes.compute`` and
  ``change_store.keep`` after it.

Also timed in each repetition, for reference (not part of the bound): the same record taken by
walking the copy (``finish(walk=True)``, what a container arm that re-owned the copy pays).

Prints each median in ms, the ratio of the medians and the median of the per-rep ratios
(each rep's two timings run back to back, so the paired ratio is the steadier number on a
loaded machine), in wall time and in this process's CPU time (user + system: what the work
costs, without the time other processes on a loaded machine held the CPUs).
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

from sprawl_orch.changes import record as change_record
from sprawl_orch.changes.changes import compute
from sprawl_orch.changes.store import keep
from sprawl_orch.copy.stamps import SyncRecord
from sprawl_orch.copy.sync import sync_with_record


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


class Clocks:
    """Wall and CPU milliseconds of each timed step."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def time(self, step: Callable[[], object]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        step()
        self.cpu.append((time.process_time() - cpu) * 1000)
        self.wall.append((time.perf_counter() - wall) * 1000)


class Ours:
    """The exec tool's `changes` work for one command, with its parts timed."""

    def __init__(self, source: Path, copy: Path, state: Path) -> None:
        self.source, self.copy, self.state = source, copy, state
        self.finish_ms: list[float] = []
        self.compute_ms: list[float] = []
        self.last: change_record.SyncRecord | None = None

    def __call__(self, synced: SyncRecord, rep: int) -> None:
        start = time.perf_counter()
        record = change_record.finish(self.copy, synced, self.source)
        mid = time.perf_counter()
        found = compute(record, self.source, self.copy)
        kept = keep(self.state, f"bench-{rep}", self.source, self.copy, record, found)
        end = time.perf_counter()
        assert found == [] and kept.total == 0, f"a no-change copy reported changes: {found[:3]}"
        self.last = record
        self.finish_ms.append((mid - start) * 1000)
        self.compute_ms.append((end - mid) * 1000)


def ratios(name: str, ours: list[float], raw: list[float]) -> str:
    pairs = statistics.median(o / r for o, r in zip(ours, raw, strict=True))
    return (
        f"ratio ours / raw, {name}: {statistics.median(ours) / statistics.median(raw):.2f}x "
        f"of the medians, {pairs:.2f}x median of the paired reps (bound 1.3x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=31)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-changes-") as tmp:
        source, copy, state = Path(tmp) / "source", Path(tmp) / "copy", Path(tmp) / "state"
        source.mkdir()
        state.mkdir()
        stamps = Path(tmp) / "stamps"
        build_tree(source, args.files, args.size)
        sync_with_record(source, copy, record=stamps)
        ours = Ours(source, copy, state)
        raw, total, walked = Clocks(), Clocks(), Clocks()
        for rep in range(args.reps):
            _, synced = sync_with_record(source, copy, record=stamps)
            # Alternate which goes first, so neither always meets the caches the other warmed.
            if rep % 2:
                raw.time(lambda: metadata_walk(copy))
            total.time(lambda s=synced, r=rep: ours(s, r))  # type: ignore[misc]
            if not rep % 2:
                raw.time(lambda: metadata_walk(copy))
            walked.time(
                lambda s=synced: compute(  # type: ignore[misc]
                    change_record.finish(copy, s, source, walk=True), source, copy
                )
            )
        entries = metadata_walk(copy)
        assert ours.last is not None
        racy = sum(1 for _, st in ours.last.entries() if not ours.last.copy_trusted(st))
        print(
            f"copy of {args.files} files in {entries - args.files} directories; "
            f"{racy} entries with a racy stamp (compared by bytes); {args.reps} reps, "
            "interleaved, each after a no-change resync"
        )
        med = statistics.median
        print(f"{'median ms':52} {'wall':>9} {'cpu':>9}")
        print(
            f"{'metadata-only walk (scandir + lstat)':52} {med(raw.wall):9.1f} {med(raw.cpu):9.1f}"
        )
        print(
            f"{'changes: finish + compute + keep, no change':52} {med(total.wall):9.1f} "
            f"{med(total.cpu):9.1f}"
        )
        print(f"{'  of which finish (record built on the sync)':52} {med(ours.finish_ms):9.1f}")
        print(f"{'  of which compute + keep (the walk after)':52} {med(ours.compute_ms):9.1f}")
        print(
            f"{'reference: record by walking the copy + compute':52} {med(walked.wall):9.1f} "
            f"{med(walked.cpu):9.1f}"
        )
        print(ratios("wall", total.wall, raw.wall))
        print(ratios("cpu", total.cpu, raw.cpu))


if __name__ == "__main__":
    main()
