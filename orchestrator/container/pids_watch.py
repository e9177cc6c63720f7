"""Did the kernel refuse a fork at the container's pids limit? (`pids.events` `max`)

Neither docker nor podman reports it (inspect has OOMKilled, nothing for pids), and the
container's cgroup is removed by the runtime as soon as its init exits, so the counter
is read while the container runs: a thread polls the cgroup's `pids.events` (v1 pids
hierarchy and v2 alike) and keeps the largest `max` seen. A command that hits the limit
and exits within one poll interval (5 ms) of it can be missed; one that is still running,
or keeps failing forks, is not.
"""

from __future__ import annotations

import glob
import threading
from pathlib import Path

from sprawl_orch.runs.cgroup_counters import read_counter

# runc removes the cgroup a few ms after init exits: a shell that gives up at its first
# refused fork is gone in that time, so the poll is fast (a read of a small file).
POLL_SECONDS = 0.005
SLOW_SECONDS = 0.2
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where docker (cgroupfs or systemd driver) and podman (cgroupfs or systemd manager) put a
# container's cgroup, under the v1 pids hierarchy or the v2 unified one.
_PATTERNS = (
    "docker/{id}",
    "libpod_parent/libpod-{id}",
    "machine.slice/libpod-{id}.scope",
    "system.slice/docker-{id}.scope",
    "*/docker/{id}",
    "*/libpod-{id}*",
)


def events_file(container_id: str, root: Path = CGROUP_ROOT) -> Path | None:
    for base in (root / "pids", root):
        for pattern in _PATTERNS:
            for found in glob.glob(str(base / pattern.format(id=container_id) / "pids.events")):
                return Path(found)
    return None


def read_max(path: Path) -> int | None:
    return read_counter(path, "max")


class PidsWatch:
    def __init__(self, container_id: str, root: Path = CGROUP_ROOT) -> None:
        self._id = container_id
        self._root = root
        self._path: Path | None = None
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sprawl-pids", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        if self._path is None:
            self._path = events_file(self._id, self._root)
        if self._path is not None:
            seen = read_max(self._path)
            if seen is not None:
                self.refused = max(self.refused, seen)

    def _run(self) -> None:
        tries = 0
        while True:
            self._read()
            tries += 1
            # A layout we don't know: stop globbing every few ms after a second of misses.
            slow = self._path is None and tries > 200
            if self._stop.wait(SLOW_SECONDS if slow else POLL_SECONDS):
                return

    def stop(self) -> bool:
        """Stop watching (one last read); True when a fork was refused at the limit."""
        self._stop.set()
        self._thread.join()
        self._read()
        return self.refused > 0
