"""Copy workers: the copy side of each new file written on worker threads (issue 23, speed).

Why: a first sync of 10 000 files cost 1.02x ``cp -a`` one file at a time, and creating the
5 000 empty files alone costs 0.66-0.69x of it (ext4, Linux 6.x): no serial walk can reach
0.6x. The create, ``sendfile``, ``fchmod``, ``futimens`` and ``fstat`` of a file are system
calls that release the GIL, so a few threads run them side by side (benchmarks/copy_sync.py
measures the worker count, see ``WORKERS``).

What stays on the walk's thread (copy/walk.py), unchanged: listing, judging (``lstat``, links,
the guard), the bounds, and opening the source file relative to its held directory with every
check of copy/source.py (``O_NOFOLLOW``, the judged inode). A worker gets an fd of the very file
judged, the copy directory's fd (held open until the directory's last job is settled) and a
name to create with ``O_CREAT | O_EXCL``; it touches nothing else.

Errors: the walk raises the first failure it collects; ``shutdown`` then cancels the jobs not
started (closing their source fds) and waits for the running ones, before the caller deletes
the copy (copy/sync.py), so no worker writes into a copy that is being deleted.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from queue import SimpleQueue
from typing import Generic, TypeVar

from sprawl_orch.copy.fileops import copy_opened_into

T = TypeVar("T")

# At least 4: on this 2-core machine the raw mechanism (open, create, sendfile per file) with
# 4 threads cost 0.29-0.45x cp -a against 0.59x serial (issue 23's last session), the work
# being mostly waits in the filesystem. At most 8: a bound on threads per sync (more not tried).
# Fewer workers, measured side by side (benchmarks/copy_sync.py --compare-workers, 10 000 files of
# 16 KiB, 2 cores, 2026-12-03, load 6.9-14 from other sessions): 2 workers took less CPU than 4
# (ratio to cp -a's CPU: ext4 in RAM 1.66 vs 1.97, tmpfs 1.77 vs 2.72 and 1.90 vs 2.09, in the runs
# where the two took turns going first) but no less wall time (1.49 vs 1.24x cp -a, 1.64 vs 1.53x,
# 1.79 vs 1.85x): the extra threads overlap the filesystem's waits and, on a loaded machine, get
# more of its CPU. Kept at 4, the measure being wall time. (Runs where the default always
# went first in each repetition had shown 2 workers ahead on both: whichever goes first there
# measures slower, so copy_sync now alternates the order.) 1 worker: 1.21-1.54x wall, 1.47-2.30x
# CPU; none (0: the copy on the walk's thread) 1.24-3.02x wall on ext4 (nothing overlaps the
# journal's waits), 1.68-2.15x CPU.
# Where the time goes (2026-12-03, 2 cores, load 4-10): the sync makes as few syscalls per file
# as the floor that keeps every check (~10.4: 2 open, 3.2 stat, 2 close, sendfile, fchmod,
# futimens; cp -a makes ~17) but the hand-over between the walk and the workers adds ~63 futex
# calls per file (GIL and queue wake-ups): on tmpfs a serial sync took 0.70-0.78 s CPU, with
# workers 0.97-1.19 s, cp -a 0.47 s and the checked floor 0.51 s (benchmarks/copy_sync.py
# floor rows). Batching 8 jobs per queue put measured within noise at load 8-10 (not kept).
# The floor without an interpreter (benchmarks/floors/first_sync.c, same runs, CPU ratio to
# cp -a's): the checked syscalls cost 0.57-1.08x in C and 0.71-1.32x in Python, so 0.6x wall
# needs files copied in parallel on idle cores, which one interpreter's threads do not give
# (docs/design.md §5.2 has every run).
WORKERS = min(8, max(4, os.cpu_count() or 1))
# Jobs handed out and not yet settled: each holds a source fd open; enough to keep every worker
# busy while the walk judges the next entries.
MAX_INFLIGHT = 64
# Descriptors left for everything else while jobs are in flight: the walk's held source and
# copy directories (two per level), each worker's new copy file, the CLI's own.
_FD_SPARE = 24


def inflight_cap(limit: int | None = None, used: int | None = None) -> int:
    """Jobs that may be in flight under this process's fd limit (RLIMIT_NOFILE): each holds
    a source fd. Why: with `ulimit -n 64` a first sync of 600 files failed with EMFILE
    ("cannot read it to copy it: Too many open files", naming a file that was fine), 64 fds
    in flight plus the held directories being more than the caller allowed."""
    if limit is None:
        try:
            import resource  # not on Windows, where there are no copy workers

            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (ImportError, OSError, ValueError):  # no limit to read: the fixed cap
            return MAX_INFLIGHT
        if limit == getattr(resource, "RLIM_INFINITY", -1) or limit < 0:
            return MAX_INFLIGHT
    if used is None:
        try:
            used = len(os.listdir("/proc/self/fd"))
        except OSError:  # no /proc (macOS): count none, the EMFILE retry of the walk remains
            used = 3
    return max(1, min(MAX_INFLIGHT, (limit - used - _FD_SPARE) // 2))


Job = tuple[T, int, os.stat_result, str, str, int, int, int]
Done = tuple[T, "tuple[int, os.stat_result] | None", "BaseException | None"]


class CopyPool(Generic[T]):
    """Worker threads that copy opened source files into new copy entries. ``T``: the walk's
    token for a job, handed back with its result. Threads start with the first job."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers if workers is not None else WORKERS
        self._jobs: SimpleQueue[Job[T] | None] = SimpleQueue()
        self._done: SimpleQueue[Done[T]] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._cancel = False
        self.inflight = 0

    def submit(
        self,
        token: T,
        sfd: int,
        sst: os.stat_result,
        path: str,
        name: str,
        dst_fd: int,
        mode: int,
        budget: int,
    ) -> None:
        """Copy source fd ``sfd`` (owned from now on: closed by the worker) into the new entry
        ``name`` of copy directory ``dst_fd`` (the caller keeps it open until settled)."""
        if not self.workers:  # no workers: copied here, on the walk's thread, settled next
            self.inflight += 1
            self._run((token, sfd, sst, path, name, dst_fd, mode, budget))
            return
        if len(self._threads) < self.workers:
            thread = threading.Thread(target=self._work, name="sprawl-copy", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._jobs.put((token, sfd, sst, path, name, dst_fd, mode, budget))
        self.inflight += 1

    def settled(self, block: bool) -> Iterator[Done[T]]:
        """The jobs finished so far (with ``block``: at least one, if any is in flight)."""
        done = self._done
        if block and self.inflight:
            self.inflight -= 1
            yield done.get()
        while not done.empty():
            self.inflight -= 1
            yield done.get()

    def _work(self) -> None:
        jobs, run = self._jobs, self._run
        while (job := jobs.get()) is not None:
            run(job)

    def _run(self, job: Job[T]) -> None:
        token, sfd, sst, path, name, dst_fd, mode, budget = job
        done = self._done
        if self._cancel:
            os.close(sfd)
            done.put((token, None, None))
            return
        try:
            result = copy_opened_into(sfd, sst, path, name, dst_fd, mode, budget)
        except BaseException as err:  # handed to the walk, which raises it
            done.put((token, None, err))
        else:
            done.put((token, result, None))

    def shutdown(self) -> None:
        """Cancel the jobs not started and wait for the running ones (the threads end)."""
        self._cancel = True
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        self.inflight = 0
