"""The container's cgroup freezer, so that the warm reset (warm_host.py) cannot be outrun.

Killing a container's processes one by one from a listing loses to a process that keeps
forking: a `setsid` loop that forks and exits its parent every few milliseconds was still
running during the next command in 4 of 10 rounds on docker and 1 of 10 on podman (issue
30), because the generation born after the listing was never in it. A frozen cgroup cannot
fork (a new child of a frozen task is frozen too), so the listing taken while frozen is
complete: every member gets SIGKILL while frozen, then the cgroup is thawed and the kills
land before any of them runs another instruction in user space (a pending fatal signal is
taken on the way back to it; a fork in progress with one pending is abandoned by the kernel).

Both kernel interfaces: cgroup v1's `freezer.state` (FROZEN / THAWED; this project's
machines: hybrid layout, docker 20.10 and podman 4.3 on cgroupfs v1) and cgroup v2's
`cgroup.freeze` (1 / 0, with `frozen 1` in `cgroup.events` once done). Found from the
init's `/proc/<pid>/cgroup` and this process's mount table, never assumed at
/sys/fs/cgroup.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FREEZE_SECONDS = 5.0
REASK_SECONDS = 0.1


@dataclass(frozen=True)
class Freezer:
    version: Literal[1, 2]
    path: Path  # the container's cgroup directory in the freezer hierarchy

    @classmethod
    def of(
        cls, pid: int, mountinfo: str | None = None, cgroup: str | None = None
    ) -> Freezer | None:
        """The freezer of `pid`'s cgroup, or None when neither interface is there (a v1 host
        without the freezer controller; a v2 kernel older than 5.2)."""
        mounts = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
        lines = cgroup if cgroup is not None else Path(f"/proc/{pid}/cgroup").read_text()
        v1: Path | None = None
        v2: Path | None = None
        for line in lines.splitlines():
            _, controllers, rel = line.split(":", 2)
            if "freezer" in controllers.split(","):
                v1 = _place(mounts, "cgroup", "freezer", rel)
            elif controllers == "":
                v2 = _place(mounts, "cgroup2", None, rel)
        if v1 is not None and (v1 / "freezer.state").exists():
            return cls(1, v1)
        if v2 is not None and (v2 / "cgroup.freeze").exists():
            return cls(2, v2)
        return None

    def freeze(self) -> bool:
        """Freeze and wait until the kernel says every member is frozen; False (thawed
        again) when it did not get there in FREEZE_SECONDS (a task stuck in the kernel)."""
        self._request()
        start = time.monotonic()
        asked = start
        while not self.frozen():
            now = time.monotonic()
            if now - start > FREEZE_SECONDS:
                self.thaw()
                return False
            if now - asked > REASK_SECONDS:
                # Asked again: v1's write re-runs freeze_cgroup() over every member, which
                # reaches a task the first pass missed. A v1 cgroup stayed FREEZING for the
                # whole 5 s once in a CI run (kernel 6.18, hybrid layout, loaded machine)
                # while every other run froze in 1-40 ms; one request was all it had.
                self._request()
                asked = now
            time.sleep(0.001)
        return True

    def _request(self) -> None:
        if self.version == 1:
            (self.path / "freezer.state").write_text("FROZEN")
        else:
            (self.path / "cgroup.freeze").write_text("1")

    def describe(self) -> dict[int, str]:
        """Each member's scheduler state and wait channel from /proc: what a freeze that
        timed out was waiting for (a frozen v1 task shows D in __refrigerator's caller)."""
        found: dict[int, str] = {}
        for pid in self.members():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                wchan = Path(f"/proc/{pid}/wchan").read_text()
            except (OSError, IndexError):
                # gone while looked at: nothing of it to describe
                continue
            found[pid] = f"state {state} in {wchan or '-'}"
        return found

    def frozen(self) -> bool:
        if self.version == 1:
            return (self.path / "freezer.state").read_text().strip() == "FROZEN"
        return "frozen 1" in (self.path / "cgroup.events").read_text().splitlines()

    def thaw(self) -> None:
        if self.version == 1:
            (self.path / "freezer.state").write_text("THAWED")
        else:
            (self.path / "cgroup.freeze").write_text("0")

    def members(self) -> set[int]:
        """Every process of the cgroup and the cgroups beneath it (v1 freezes those too)."""
        found: set[int] = set()
        for procs in self.path.rglob("cgroup.procs"):
            try:
                found |= {int(x) for x in procs.read_text().split()}
            except (OSError, ValueError):
                # a child cgroup removed while walked: it holds no pids
                continue
        return found


def _place(mountinfo: str, fstype: str, option: str | None, rel: str) -> Path | None:
    """Where cgroup path `rel` is in this process's view: the mount of `fstype` (with
    `option` among its super options for v1) whose root is an ancestor of `rel`."""
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != fstype:
            continue
        if option is not None and option not in tail[2].split(","):
            continue
        root, point = fields[3], fields[4]
        if rel == root or rel.startswith(root.rstrip("/") + "/"):
            return Path(point) / rel[len(root.rstrip("/")) :].lstrip("/")
    return None
