"""A warm container seen from the host: its processes, its writable places, its OOM count.

Between two commands in one kept container (warm.py), what a fresh container guaranteed by
being new must be made true again, from outside, where the command cannot interfere:

- processes: the container's members are the union of its own cgroup's `cgroup.procs` and
  every host process whose pid namespace is the container's (`/proc/<pid>/ns/pid`), so a
  `setsid` or double-forked process is found whatever its process group. Everything but the
  idle init (the baseline, pinned by pid and start time) is SIGKILLed until none is left.
- writable places: every rw tmpfs/mqueue mount of the container (from its init's
  mountinfo: /tmp, /dev/shm, /dev/mqueue, podman's /run and /var/tmp, …) is snapshotted when
  the container is made; after each command whatever is new is deleted (through
  /proc/<init>/root, with rmtree's fd-based walk, which never follows a symlink), and a
  baseline entry that changed means the container was changed. SysV IPC objects (the IPC
  namespace outlives processes) are removed with `ipcrm -a` inside that namespace.
- resources: the memory cgroup's OOM-kill counter, read before and after each command.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from sprawl_orch.runs.cgroup_counters import read_counter

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Mount types a command can write into without privileges (bind mounts are only the copy).
WRITABLE_TYPES = ("tmpfs", "mqueue")
KILL_ROUNDS = 50


@dataclass(frozen=True)
class Entry:
    kind: int  # st_mode & S_IFMT
    mode: int
    uid: int
    size: int
    mtime_ns: int


@dataclass
class HostView:
    init: int
    baseline: frozenset[tuple[int, float]]
    pidns: int
    procs_files: tuple[Path, ...]
    oom_file: Path | None
    writable: tuple[str, ...]
    mounts: frozenset[str] = frozenset()
    snapshot: dict[str, dict[str, Entry]] = field(default_factory=dict)

    @classmethod
    def of(cls, init: int, workdir: str) -> HostView:
        """`init`: the host pid of the container's PID 1 (State.Pid); call when idle."""
        root = psutil.Process(init)
        baseline = frozenset(
            (p.pid, p.create_time()) for p in [root, *root.children(recursive=True)]
        )
        points = _mount_points(init)
        view = cls(
            init,
            baseline,
            os.stat(f"/proc/{init}/ns/pid").st_ino,
            *_cgroup_files(init),
            _writable_mounts(init, workdir),
            frozenset(points),
        )
        view.snapshot = {m: view._walk(m) for m in view.writable}
        return view

    # -- processes ------------------------------------------------------------------------
    def members(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(x) for x in procs.read_text().split()}
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{name}/ns/pid").st_ino == self.pidns:
                        found.add(int(name))
        return found

    def strays(self) -> list[int]:
        """Members that are not the idle init (what commands started)."""
        left = []
        for pid in self.members():
            try:
                if (pid, psutil.Process(pid).create_time()) not in self.baseline:
                    left.append(pid)
            except psutil.Error:
                continue
        return left

    def command_alive(self, strays: list[int]) -> bool:
        """Whether the exec'd command itself still runs: its parent is outside the container
        (the engine's shim/conmon); what it left behind was reparented to the init."""
        inside = self.members()
        for pid in strays:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).ppid() not in inside:
                    return True
        return False

    def kill_strays(self) -> bool:
        """SIGKILL every stray until none is left (a fork racing the kill is met in the next
        round; the pids limit bounds it). False when some survived every round."""
        for _ in range(KILL_ROUNDS):
            strays = self.strays()
            if not strays:
                return True
            for pid in strays:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)
        return not self.strays()

    def baseline_intact(self) -> bool:
        for pid, started in self.baseline:
            try:
                if psutil.Process(pid).create_time() != started:
                    return False
            except psutil.Error:
                return False
        return True

    # -- resources ------------------------------------------------------------------------
    def oom_kills(self) -> int | None:
        if self.oom_file is None:
            return None
        return read_counter(self.oom_file, "oom_kill")

    # -- writable places ------------------------------------------------------------------
    def _walk(self, mount: str) -> dict[str, Entry]:
        """Every entry of a writable mount, not descending into mounts beneath it (the copy
        is mounted at the working directory's own path, which may be under /tmp). A
        directory's size and mtime change with what commands add to it: not compared."""
        base = f"/proc/{self.init}/root{mount}"
        found: dict[str, Entry] = {}
        for top, dirs, files in os.walk(base):
            inside = "/" + os.path.relpath(top, f"/proc/{self.init}/root")
            dirs[:] = [d for d in dirs if os.path.join(inside, d) not in self.mounts]
            for name in [*dirs, *files]:
                path = os.path.join(top, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    kind = st.st_mode & 0o170000
                    plain = kind != 0o040000
                    found[os.path.relpath(path, base)] = Entry(
                        kind,
                        st.st_mode & 0o7777,
                        st.st_uid,
                        st.st_size if plain else 0,
                        st.st_mtime_ns if plain else 0,
                    )
        return found

    def reset_writable(self) -> list[str]:
        """Delete what a command added; returns baseline entries it changed or removed."""
        changed: list[str] = []
        for mount in self.writable:
            base = f"/proc/{self.init}/root{mount}"
            before = self.snapshot[mount]
            now = self._walk(mount)
            for rel in sorted(set(now) - set(before)):
                if os.path.dirname(rel) and os.path.dirname(rel) not in before:
                    continue  # beneath a new directory: goes with it
                path = os.path.join(base, rel)
                if now[rel].kind == 0o040000:
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            changed += [f"{mount}/{rel}" for rel, entry in before.items() if now.get(rel) != entry]
        return changed

    def reset_ipc(self) -> str | None:
        """Remove every SysV IPC object of the container's IPC namespace; None when done."""
        done = subprocess.run(
            ["nsenter", "-t", str(self.init), "--ipc", "--", "ipcrm", "--all"],
            capture_output=True,
            text=True,
            check=False,
        )
        return None if done.returncode == 0 else (done.stderr.strip() or "ipcrm failed")


def _cgroup_files(init: int) -> tuple[tuple[Path, ...], Path | None]:
    """(cgroup.procs files, the OOM counter) of the container's cgroup (v1 or v2)."""
    procs: list[Path] = []
    oom: Path | None = None
    for line in Path(f"/proc/{init}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        names = controllers.split(",")
        if controllers == "":
            # v2; on a hybrid host (this project's machines: v1 controllers plus an empty
            # "unified" hierarchy) its files do not exist and the v1 ones count
            procs.append(CGROUP_ROOT / rel / "cgroup.procs")
            events = CGROUP_ROOT / rel / "memory.events"
            oom = oom or (events if events.exists() else None)
        elif "pids" in names:
            procs.append(CGROUP_ROOT / "pids" / rel / "cgroup.procs")
        if "memory" in names:
            control = CGROUP_ROOT / "memory" / rel / "memory.oom_control"
            oom = control if control.exists() else oom
    return tuple(p for p in procs if p.exists()), oom


def _mount_points(init: int) -> list[str]:
    return [line.split()[4] for line in Path(f"/proc/{init}/mountinfo").read_text().splitlines()]


def _writable_mounts(init: int, workdir: str) -> tuple[str, ...]:
    """rw tmpfs/mqueue mount points of the container, except /dev itself (device nodes,
    root's 0755: a command cannot write there) and the copy."""
    found: list[str] = []
    for line in Path(f"/proc/{init}/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, fstype = left.split(), right.split()[0]
        point, options = fields[4], fields[5]
        if (
            fstype in WRITABLE_TYPES
            and "rw" in options.split(",")
            and point not in ("/dev", workdir)
            and not point.startswith("/proc/")
            and not point.startswith("/sys/")
        ):
            found.append(point)
    return tuple(dict.fromkeys(found))
