"""The relay's threads, kept by their proxy for its next tunnel instead of one new thread per
direction per tunnel.

A thread's start (clone, then the starter waiting for the new thread to run) sat on every
tunnel's setup path twice: 0.08 ms median and 0.9 ms at the 90th percentile on 2 loaded cores,
and the ServerHello waited for the second. Handing a direction to a thread that is already
waiting costs one wake-up. Side by side in one run (benchmarks/egress_proxy.py, three runs of
30 reps of 20 MB, load 2.6-3.5), kept vs new threads: whole GET paired 0.86 / 0.84 / 0.84 vs
0.80 / 0.78 / 0.81 of direct, setup added 3.5 / 4.2 / 2.8 ms vs 4.7 / 3.5 / 4.5 ms.

Bounded as the threads were: a thread is kept only while it waits (at most as many as the
proxy's busiest moment ran, itself capped by MAX_CONNECTIONS); one that waited IDLE_S for
work ends, and the proxy's close ends the rest and waits for them, so a command's proxy
leaves no thread behind.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

Job = Callable[[], None]
NAME = "sprawl-egress-splice"
# Long enough for a command's next connection (pip's next download) to find a thread waiting.
IDLE_S = 30.0


class Workers:
    def __init__(self, idle_s: float = IDLE_S) -> None:
        self._idle_s = idle_s
        self._lock = threading.Lock()
        # Each waiting thread's own queue: a job put there is run by exactly that thread.
        self._idle: list[queue.SimpleQueue[Job | None]] = []
        self._threads: set[threading.Thread] = set()
        self._closed = False

    def run(self, job: Job) -> None:
        """Run `job` on a waiting thread or a new one. RuntimeError when no thread can start
        ("can't start new thread") or the proxy closed: then the job never runs."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the egress proxy closed: no relay thread")
            jobs = self._idle.pop() if self._idle else None
        if jobs is not None:
            jobs.put(job)
            return
        jobs = queue.SimpleQueue()
        jobs.put(job)
        thread = threading.Thread(target=self._serve, args=(jobs,), name=NAME, daemon=True)
        with self._lock:
            self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:  # the queue, with the job in it, goes with the thread
            with self._lock:
                self._threads.discard(thread)
            raise

    def _serve(self, jobs: queue.SimpleQueue[Job | None]) -> None:
        try:
            while (job := self._next(jobs)) is not None:
                job()  # raises only on a bug: the thread ends (and is reported) as before
                with self._lock:
                    if self._closed:
                        return
                    self._idle.append(jobs)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _next(self, jobs: queue.SimpleQueue[Job | None]) -> Job | None:
        try:
            return jobs.get(timeout=self._idle_s)
        except queue.Empty:
            with self._lock:
                if jobs in self._idle:
                    self._idle.remove(jobs)
                    return None
            # Taken by run() while the wait timed out: its job is on the way.
            return jobs.get()

    def alive(self) -> int:
        with self._lock:
            return len(self._threads)

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self, wait: bool = True, timeout: float = 30.0) -> None:
        """End the waiting threads; with `wait`, wait (up to `timeout` in all) for every
        thread, the busy ones included: the proxy's close cut their sockets first, so they
        are ending. Without (the proxy's loop died and may have cut only the client's side),
        a busy thread ends when its splice returns, as it did before threads were kept."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for jobs in idle:
            jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads if wait else ():
            thread.join(max(0.0, deadline - time.monotonic()))
