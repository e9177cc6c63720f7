"""The cost of `apply` bringing every file of a command's changes into the working directory,
against the plain mechanism with the same durability, interleaved in one run (issue #18).

    python benchmarks/apply_cost.py [--files N] [--reps R]

Builds a tree of N files (default 10 000 of 4 KiB in ~100 directories). Each repetition
(untimed setup) puts the tree's old bytes back, syncs a copy, records it, rewrites every file
of the copy (the "command"), then computes and keeps the changes (timed apart: ``keep``
stores each changed file's new bytes, that is what `apply` later reads). Then, in alternating
order:

- raw: for each changed file, its new bytes written to a temporary file in the target's
  directory, fsync, rename over the name, fsync of the directory -- the same guarantee (every
  file old or new after a crash, never torn), without checks or journal -- into a second
  tree holding the old bytes;
- ours: ``apply.apply`` of all the kept changes (stamps checked against the sync's for
  conflicts, beneath-the-tree opens, a journal so a killed apply can be finished).

Prints the medians in ms and the ratio ours / raw (each with 2 fsyncs or more per file, so
the disk sets the pace: absolute numbers depend on it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.changes import record as change_record
from sprawl_orch.changes.apply import apply
from sprawl_orch.changes.changes import compute
from sprawl_orch.changes.store import keep
from sprawl_orch.copy.sync import sync_with_record


def rel_paths(files: int) -> list[str]:
    dirs = max(1, files // 100)
    return [f"d{i % dirs:03d}/f{i:06d}.txt" for i in range(files)]


def write_tree(root: Path, rels: list[str], data: dict[str, bytes]) -> None:
    for rel in rels:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[rel])


def raw_apply(copy: Path, target: Path, rels: list[str]) -> None:
    for rel in rels:
        head, _, name = rel.rpartition("/")
        dfd = os.open(target / head, os.O_RDONLY | os.O_DIRECTORY)
        try:
            tmp = f".tmp-{name}"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
            try:
                os.write(out, (copy / rel).read_bytes())
                os.fsync(out)
            finally:
                os.close(out)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            os.fsync(dfd)
        finally:
            os.close(dfd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rels = rel_paths(args.files)
    old = {rel: os.urandom(args.size) for rel in rels}
    new = {rel: os.urandom(args.size) for rel in rels}
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-apply-") as tmp:
        base = Path(tmp)
        source, copy, raw_target = base / "source", base / "copy", base / "raw"
        state, stamps = base / "state", base / "stamps"
        state.mkdir()
        raw_ms: list[float] = []
        ours_ms: list[float] = []
        keep_ms: list[float] = []
        for rep in range(args.reps):
            write_tree(source, rels, old)
            write_tree(raw_target, rels, old)
            time.sleep(0.1)  # the tree's stamps older than the sync's margin, as usual
            _, synced = sync_with_record(source, copy, record=stamps)
            record = change_record.finish(copy, synced, source)
            write_tree(copy, rels, new)
            start = time.perf_counter()
            found = compute(record, source, copy)
            kept = keep(state, f"bench-{rep}", source, copy, record, found, budget=1 << 40)
            keep_ms.append((time.perf_counter() - start) * 1000)
            assert kept.modified == args.files and kept.handle is not None, kept
            handle = kept.handle

            def ours(h: str = handle) -> None:
                done = apply(state, h, workdir=source)
                assert len(done.applied) == args.files, done

            steps = [("raw", lambda: raw_apply(copy, raw_target, rels)), ("ours", ours)]
            for name, step in steps if rep % 2 == 0 else steps[::-1]:
                os.sync()  # the other step's writeback out of this one's time
                start = time.perf_counter()
                step()
                (raw_ms if name == "raw" else ours_ms).append((time.perf_counter() - start) * 1000)
            assert (source / rels[-1]).read_bytes() == new[rels[-1]]
        raw, ours_med = statistics.median(raw_ms), statistics.median(ours_ms)
        print(
            f"{args.files} files of {args.size} bytes rewritten by the command; {args.reps} "
            "reps, interleaved"
        )
        print(
            f"{'changes.compute + change_store.keep (untimed in the ratio)':60} "
            f"{statistics.median(keep_ms):9.1f} ms"
        )
        print(f"{'raw: temp + fsync + rename + fsync dir, per file':60} {raw:9.1f} ms")
        print(f"{'ours: apply.apply, all kept changes':60} {ours_med:9.1f} ms")
        pairs = statistics.median(o / r for o, r in zip(ours_ms, raw_ms, strict=True))
        print(
            f"ratio ours / raw: {ours_med / raw:.2f}x of the medians, {pairs:.2f}x median of "
            "the paired reps"
        )


if __name__ == "__main__":
    main()
