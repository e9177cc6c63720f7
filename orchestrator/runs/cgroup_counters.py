"""One count from a cgroup's flat-keyed file ("key value" lines: memory.events,
memory.oom_control, pids.events), read the same way by a run's cgroup, the warm container
and the pids watch."""

from __future__ import annotations

from pathlib import Path


def read_counter(path: Path, key: str) -> int | None:
    """The value of `key` in `path`; None when the file can't be read or has no such line
    with a number (v1 kernels before 4.13 have no `oom_kill` line)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        # a cgroup removed or a counter absent: no count, which the docstring promises
        return None
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None
