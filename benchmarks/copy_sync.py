"""Synced-copy cost against the raw mechanisms, measured side by side in one run.

    python benchmarks/copy_sync.py [--files N] [--size BYTES] [--reps R] [--workers W] [--tmp DIR]

Builds a tree of N files (default 10 000 of 16 KiB, in ~100 directories) in a temporary
directory, then measures the median of R repetitions of:

- first sync: ``orchestrator.copy_sync.sync`` into a fresh directory vs ``cp -a``, wall and CPU
  time (ours: all our threads; cp: the child's user + system time); and the floor of a checked
  first sync (floor_copy below: the fewest syscalls per file that keep every check,
  serial, then on as many threads and as many processes as cores) vs the same ``cp -a``;
- no-change resync: our sync vs ``rsync -a --delete --checksum`` (reads both sides, as we do)
  and, for reference, plain ``rsync -a --delete`` (size + mtime only, not safe enough for us);
- a metadata-only walk (scandir + stat of both sides, no file reads): the floor the
  racy-clean stamp record (copy_stamps) can reach; the target is ours <= 1.3x this walk;
- issue 26 item 4 (docs/design.md §5.1, the remembered copy side): the same walk of the
  person's tree only (scandir + lstat of one side), the floor of a resync that trusts a
  memory of the copy, and a sketch of that resync's per-entry work (one-side walk + the
  racy-clean rule on the source half of each record entry, the copy half taken from the
  record), both against the both-sides walk; the target is a resync <= 0.6x that walk. The
  sketch runs twice: on the record as loaded, and on the form a server would keep between
  calls (by directory, only entries the racy-clean rule already vouches for); and the resync
  itself given that memory (copy/walk_memory.py: sync_with_record with ``memory=``, its gate
  included), built once from a walk of the copy as the exec server keeps it between calls;
- the same resync without the stamp record (every same-length file's bytes compared), for
  reference: what the record saves.

Before each timed step the page cache is written back (``os.sync``) so one step's writeback
does not land in the next one's time. Prints a table with ms and ratios (ours / raw).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.floors.copy_side import (
    memory_walk_by_dir,
    memory_walk_sketch,
    one_side_walk,
    vouched_by_dir,
)
from benchmarks.floors.first_sync import floor_copy
from benchmarks.floors.first_sync_c import build as build_c_floor
from benchmarks.floors.first_sync_c import c_floor_copy
from sprawl_orch.changes.record import fs_now_ns
from sprawl_orch.copy import memory as copy_memory
from sprawl_orch.copy import pool as copy_pool
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy import sync as copy_sync
from sprawl_orch.copy.sync import Bounds, FileWork, sync, sync_with_record

Row = tuple[str, str, float, str, float]
"""case, ours, ours' ms, raw, raw's ms: one line of the table."""


def build_tree(root: Path, files: int, size: int) -> None:
    dirs = max(1, files // 100)
    for i in range(files):
        d = root / f"d{i % dirs:03d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:06d}.bin").write_bytes(os.urandom(size))


CPU: dict[str, list[float]] = {}
_CORES = os.cpu_count() or 1
# The floor of a checked first sync (floor_copy below): (row name, workers, processes).
FLOORS = [
    ("checked syscalls, serial", 1, False),
    (f"same, {_CORES} threads", _CORES, False),
    (f"same, {_CORES} processes", _CORES, True),
]
# The same floor in C (floors/first_sync.c, no interpreter): (row name, threads).
C_FLOORS = [("same in C, serial", 1), (f"same in C, {_CORES} threads", _CORES)]


def _cpu_s() -> float:
    """CPU seconds of this process (all its threads) and of its waited-for children (cp)."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(step: Callable[[], object], cpu: str | None = None) -> float:
    """Wall ms of ``step``; with ``cpu``, its CPU ms (this process's threads and its children,
    e.g. cp) is kept under that name too (on a machine shared with other jobs the CPU time
    is the steadier of the two)."""
    os.sync()
    start, start_cpu = time.perf_counter(), _cpu_s()
    step()
    if cpu is not None:
        CPU.setdefault(cpu, []).append((_cpu_s() - start_cpu) * 1000)
    return (time.perf_counter() - start) * 1000


def same_tree(a: Path, b: Path) -> str | None:
    """None when trees ``a`` and ``b`` hold the same names, sizes, permission bits and mtimes
    (ns; directories too), else the first difference: the floor rows must do the sync's work."""
    for here, dirs, files in os.walk(a):
        for name in ("", *dirs, *files):
            x = os.path.join(here, name)
            y = os.path.join(b, os.path.relpath(x, a))
            try:
                sx, sy = os.lstat(x), os.lstat(y)
            except OSError as err:
                return str(err)
            if (sx.st_size if not stat.S_ISDIR(sx.st_mode) else 0, sx.st_mode, sx.st_mtime_ns) != (
                sy.st_size if not stat.S_ISDIR(sy.st_mode) else 0,
                sy.st_mode,
                sy.st_mtime_ns,
            ):
                return f"{y} differs from {x}"
        if len(os.listdir(here)) != len(os.listdir(os.path.join(b, os.path.relpath(here, a)))):
            return f"{here}: a different number of entries"
    return None


def filesystem(path: Path) -> str:
    """The type of the filesystem ``path`` is on (as /proc/mounts names it), or "?"."""
    try:
        with open("/proc/mounts") as mounts:
            found = [line.split() for line in mounts]
    except OSError:
        return "?"
    real = os.path.realpath(path)
    best = max(
        (m for m in found if real == m[1] or real.startswith(m[1].rstrip("/") + "/")),
        key=lambda m: len(m[1]),
        default=None,
    )
    return best[2] if best else "?"


def run(argv: list[str]) -> None:
    subprocess.run(argv, check=True)


def stat_walk(src: Path, dst: Path) -> None:
    """Walk both trees: list every directory on both sides (scandir; a resync must, to find
    the copy's extras) and stat every entry on both sides; read no file."""
    stack = [(str(src), str(dst))]
    while stack:
        s, d = stack.pop()
        with os.scandir(d) as listed:
            names = {e.name for e in listed}
        with os.scandir(s) as it:
            for entry in it:
                entry.stat()
                other = os.path.join(d, entry.name)
                if entry.name in names:
                    os.stat(other, follow_symlinks=False)
                if entry.is_dir():
                    stack.append((entry.path, other))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=16 * 1024)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--tmp",
        default=None,
        help="where the trees are made (default: the temporary directory; e.g. /dev/shm to "
        "take the disk out and compare CPU work only)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="copy workers (default: copy.pool.WORKERS)"
    )
    parser.add_argument(
        "--compare-workers",
        default="",
        help="also time the first sync with these worker counts, side by side (e.g. 0,1,2,4; "
        "0: the copy on the walk's thread)",
    )
    args = parser.parse_args()
    also = [int(w) for w in args.compare_workers.split(",") if w.strip()]
    default_workers = copy_pool.WORKERS if args.workers is None else args.workers
    if args.workers is not None:
        copy_pool.WORKERS = args.workers
    for tool in ("cp", "rsync"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install -y {tool})")
    total = args.files * args.size
    bounds = Bounds(files=max(args.files, 1), bytes=max(total, 1))

    with tempfile.TemporaryDirectory(prefix="sprawl-bench-", dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        trees_in = f"{tmp.parent} ({filesystem(tmp)})"
        src = tmp / "src"
        src.mkdir()
        build_tree(src, args.files, args.size)
        # Each repetition copies into a fresh directory and nothing is deleted until the end:
        # ext4 (mounted with discard here) is ~3x slower to allocate right after a big delete.
        first_ours: list[float] = []
        first_cp: list[float] = []
        floors: dict[str, list[float]] = {name: [] for name, _, _ in FLOORS}
        c_program = build_c_floor(tmp)
        c_floors: dict[str, list[float]] = {name: [] for name, _ in C_FLOORS}
        by_workers: dict[int, list[float]] = {w: [] for w in also}
        for i in range(args.reps):  # interleaved so all see the same disk state
            # The default and the compared counts take turns going first: whichever ran
            # first in each repetition measured slower (2026-12-03), whatever its count.
            order = [None, *also] if i % 2 == 0 else [*also, None]
            for w in order:
                copy_pool.WORKERS = default_workers if w is None else w
                where, name = (
                    (f"ours{i}", "first") if w is None else (f"ours-w{w}-{i}", f"first-w{w}")
                )
                took = timed(partial(sync, src, tmp / where, bounds), name)
                (first_ours if w is None else by_workers[w]).append(took)
            copy_pool.WORKERS = default_workers
            first_cp.append(timed(partial(run, ["cp", "-a", str(src), str(tmp / f"cp{i}")]), "cp"))
            for name, workers, procs in FLOORS:
                where = str(tmp / f"floor-{workers}-{procs}-{i}")
                copy = partial(floor_copy, str(src), where, workers, procs)
                floors[name].append(timed(copy, f"floor {name}"))
            for name, threads in C_FLOORS if c_program is not None else ():
                os.sync()  # its own time (first to last syscall), not timed(): no exec in it
                where, start_cpu = str(tmp / f"floor-c-{threads}-{i}"), _cpu_s()
                c_floors[name].append(c_floor_copy(c_program, str(src), where, threads))
                CPU.setdefault(f"floor {name}", []).append((_cpu_s() - start_cpu) * 1000)
        copies = [(name, f"floor-{workers}-{procs}-0") for name, workers, procs in FLOORS]
        if c_program is not None:
            copies += [(name, f"floor-c-{threads}-0") for name, threads in C_FLOORS]
        for name, copy in copies:  # each floor copy holds what the sync's does
            if (differs := same_tree(tmp / "ours0", tmp / copy)) is not None:
                sys.exit(f"the floor copy ({name}) is not the sync's: {differs}")
        ours = tmp / "ours0"
        record = tmp / "ours0.stamps"

        # Resyncs of an equal copy; one warm-up each so all read from the page cache.
        rs_sum, rs_plain = tmp / "rsync-sum", tmp / "rsync-plain"
        checksum = ["rsync", "-a", "--delete", "--checksum", f"{src}/", f"{rs_sum}/"]
        plain = ["rsync", "-a", "--delete", f"{src}/", f"{rs_plain}/"]
        run(checksum)
        run(plain)
        sync(src, ours, bounds, record=record)
        # The copy was written moments ago: the racy-clean rule distrusts stamps younger than
        # the sync that recorded them, so the first resyncs compare bytes. Wait out the margin
        # once and resync, as any later CLI call would find it.
        time.sleep(0.1)
        sync(src, ours, bounds, record=record)
        re_ours: list[float] = []
        re_bytes: list[float] = []
        re_sum: list[float] = []
        re_plain: list[float] = []
        re_stat: list[float] = []
        re_one: list[float] = []
        re_sketch: list[float] = []
        kept = copy_stamps.load(record)
        if kept is None or memory_walk_sketch(src, kept):
            sys.exit("the sketch of the remembered-copy resync could not vouch for every file")
        by_dir = vouched_by_dir(kept)
        if memory_walk_by_dir(src, by_dir):
            sys.exit("the per-directory sketch could not vouch for every file")
        re_by_dir: list[float] = []
        # The memory as the server would hold it: the copy walked after a command that changed
        # nothing (copy/memory.py observe, the `changes` walk's stand-in), built once.
        _, snap = copy_memory.observe(ours, {}, 1 << 62)
        seen, _ = copy_memory.observe(ours, snap, fs_now_ns(tmp))
        kept_mem = copy_memory.build("t", os.lstat(ours), kept, os.stat(record), seen)
        if kept_mem is None:
            sys.exit("no memory could be built of the copy")
        mem: copy_memory.CopyMemory = kept_mem
        # Once untimed, without the fallback: a copy not as remembered raises here.
        copy_sync._synced(
            src, ours, str(src), bounds, record, copy_sync.Excludes(), None, None, mem
        )
        re_mem: list[float] = []

        def with_memory() -> None:
            gated = copy_memory.gate(mem, "t", ours, record, False)
            work.append(sync_with_record(src, ours, bounds, record=record, memory=gated)[0])

        no_change = (
            f"created=0 rewritten=0 removed=0 walked={args.files + len(os.listdir(src))} "
            "excluded=() refused_links=() skipped=()"
        )
        work: list[FileWork] = []
        for _ in range(args.reps):
            re_ours.append(
                timed(lambda: work.append(sync(src, ours, bounds, record=record)), "ours")
            )
            re_bytes.append(timed(lambda: work.append(sync(src, ours, bounds))))
            re_sum.append(timed(lambda: run(checksum)))
            re_plain.append(timed(lambda: run(plain)))
            re_stat.append(timed(lambda: stat_walk(src, ours), "walk"))
            re_one.append(timed(lambda: one_side_walk(src), "one"))
            re_sketch.append(timed(lambda: memory_walk_sketch(src, kept), "sketch"))
            re_by_dir.append(timed(lambda: memory_walk_by_dir(src, by_dir), "by_dir"))
            re_mem.append(timed(with_memory, "memory"))
            for done in work[-3:]:
                if str(done) != no_change:
                    sys.exit(f"resync was not a no-change resync: {done}")

    med = statistics.median
    ours_re = med(re_ours)
    cp_ms = med(first_cp)
    walk_ms, walk_cpu = med(re_stat), med(CPU["walk"])

    def against_walk(case: str, name: str, ms: float, cpu: list[float]) -> list[Row]:
        """A row against the metadata-only walk of both sides, and its CPU-time row."""
        walk = "metadata-only walk, both sides"
        return [
            (case, name, ms, walk, walk_ms),
            ("  same, CPU time", name, med(cpu), walk, walk_cpu),
        ]

    rows: list[Row] = [
        ("first sync", "sync()", med(first_ours), "cp -a", cp_ms),
        ("  same, CPU time", "sync()", med(CPU["first"]), "cp -a", med(CPU["cp"])),
        *(
            row
            for w in also
            for row in (
                ("first sync", f"sync(), {w} workers", med(by_workers[w]), "cp -a", cp_ms),
                (
                    "  same, CPU time",
                    f"sync(), {w} workers",
                    med(CPU[f"first-w{w}"]),
                    "cp -a",
                    med(CPU["cp"]),
                ),
            )
        ),
        *(
            row
            for i, (name, ms) in enumerate(
                [
                    *((name, floors[name]) for name, _, _ in FLOORS),
                    *((name, c_floors[name]) for name, _ in C_FLOORS if c_floors[name]),
                ],
                1,
            )
            for row in (
                (f"first sync floor {i}", name, med(ms), "cp -a", cp_ms),
                ("  same, CPU time", name, med(CPU[f"floor {name}"]), "cp -a", med(CPU["cp"])),
            )
        ),
        ("no-change resync", "sync()", ours_re, "rsync -a --delete --checksum", med(re_sum)),
        ("no-change resync", "sync()", ours_re, "rsync -a --delete (mtime+size)", med(re_plain)),
        *against_walk("no-change resync", "sync()", ours_re, CPU["ours"]),
        ("no-change resync", "sync()", ours_re, "sync() without stamp record", med(re_bytes)),
        # Issue 26 item 4: what remembering the copy's side can save (target: <= 0.6x).
        *against_walk("floor, one side", "one-side walk", med(re_one), CPU["one"]),
        *against_walk("sketch, one side", "memory sketch", med(re_sketch), CPU["sketch"]),
        *against_walk("sketch, kept by dir", "memory by dir", med(re_by_dir), CPU["by_dir"]),
        *against_walk("resync with a memory", "sync(memory=)", med(re_mem), CPU["memory"]),
    ]
    print(
        f"{args.files} files x {args.size} B in {max(1, args.files // 100)} dirs, "
        f"median of {args.reps}, {copy_pool.WORKERS} copy workers, {_CORES} cores, "
        f"load {os.getloadavg()[0]:.1f}, trees in {trees_in}"
    )
    print(f"{'case':<26}{'ours':<26}{'ms':>8}  {'raw':<32}{'ms':>8}  {'ratio':>6}")
    if not any(c_floors.values()):
        print("first sync floor 4-5: the C floor is absent (no C compiler)")
    for case, ours_name, ours_ms, raw_name, raw_ms in rows:
        print(
            f"{case:<26}{ours_name:<26}{ours_ms:>8.0f}  {raw_name:<32}{raw_ms:>8.0f}  "
            f"{ours_ms / raw_ms:>6.2f}"
        )


if __name__ == "__main__":
    main()
