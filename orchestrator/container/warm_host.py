"""A warm container seen from the host: its processes, its writable places, its OOM count.

Between two commands in one kept container (warm.py), what a fresh container guaranteed by
being new must be made true again, from outside, where the command cannot interfere:

- processes: the container's members are the union of its own cgroup's `cgroup.procs` and
  every host process whose pid namespace is the container's (`/proc/<pid>/ns/pid`), so a
  `setsid` or double-forked process is found whatever its process group. The cgroup is
  frozen first (warm_freeze.py): a process that keeps forking cannot outrun a listing taken
  while nothing can fork. Everything but the idle init (the baseline, pinned by pid and
  start time) is SIGKILLed, the cgroup thawed, and the reset is done only once the
  container holds nothing but the init. Without a freezer a kill can be outrun: a command
  that left any process gets its container replaced (`unfrozen_kill`).
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
import ctypes
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from sprawl_orch.container.warm_freeze import Freezer
from sprawl_orch.core.beneath import Moved, open_dir, walk_down
from sprawl_orch.core.removal import remove_entry
from sprawl_orch.runs.cgroup_counters import read_counter

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Mount types a command can write into without privileges (bind mounts are only the copy).
WRITABLE_TYPES = ("tmpfs", "mqueue")
KILL_ROUNDS = 50
# Freeze-kill-thaw rounds, and how long the killed may take to be reaped by the init.
FROZEN_ROUNDS = 3
QUIET_SECONDS = 5.0


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
    freezer: Freezer | None = None
    # Set when processes were killed without a freezer (a kill that can be outrun): the
    # container is not trusted with another command. Cleared by WarmRun per command.
    unfrozen_kill: bool = False

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
        view.freezer = Freezer.of(init)
        return view

    # -- processes ------------------------------------------------------------------------
    def members(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(x) for x in procs.read_text().split()}
        if self.freezer is not None:
            found |= self.freezer.members()
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
        """Kill every process a command started; True once the container holds nothing but
        the idle init. False when some survived (the container must then be replaced)."""
        if self.freezer is None:
            return self._kill_unfrozen()
        for _ in range(FROZEN_ROUNDS):
            if not self.freezer.freeze():
                continue
            try:
                # Frozen: nothing forks, so this listing is every member there is.
                strays = self.strays()
                for pid in strays:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            finally:
                self.freezer.thaw()
            # None found frozen: the container held its init alone, and only the init can
            # fork after the thaw (a change of it is baseline_intact's to see) -- listing
            # again was one more walk of /proc per command for nothing.
            if not strays or self._quiet():
                return True
        return False

    def _quiet(self) -> bool:
        """Wait until the killed are gone (reaped by the init, to which they were
        reparented): the next command starts only in a container holding the init alone."""
        deadline = time.monotonic() + QUIET_SECONDS
        while self.strays():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def _kill_unfrozen(self) -> bool:
        """SIGKILL every stray until none is seen (a fork racing the kill is met in the next
        round; the pids limit bounds it). A listing can miss a generation born after it, so
        having killed anything at all makes `unfrozen_kill` true: not to be reused."""
        for _ in range(KILL_ROUNDS):
            strays = self.strays()
            if not strays:
                return not self.unfrozen_kill
            self.unfrozen_kill = True
            for pid in strays:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)
        return False

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
        directory's size and mtime change with what commands add to it: not compared.

        Iterative and by directory fd: a command that nests 1500 directories in /tmp made
        os.walk (recursive in Python 3.11) raise RecursionError out of ExecTool.exec, and
        past ~2000 levels a path-based lstat fails with ENAMETOOLONG, which would hide the
        entries from the reset. The walk is core/beneath.py's walk_down (the tree removal's
        too): one fd held at a time, the climb back through ".." checked against the
        directory it came from, so a tree moved under the walk raises OSError rather than
        being misread; a subdirectory gone since it was listed is passed over."""
        base = f"/proc/{self.init}/root{mount}"
        found: dict[str, Entry] = {}
        try:
            fd = open_dir(base)
        except OSError:
            return found
        try:
            walk_down(fd, lambda at, rel: self._list(at, mount, rel, found), vanished_ok=True)
        except Moved as err:
            raise OSError(f"a directory under {mount} moved while it was read") from err
        return found

    def _list(self, fd: int, mount: str, rel: str, found: dict[str, Entry]) -> list[str]:
        """Record the entries of the open directory `rel`; its subdirectories to enter."""
        subdirs: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                path = os.path.join(rel, entry.name)
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    kind = st.st_mode & 0o170000
                    plain = kind != 0o040000
                    found[path] = Entry(
                        kind,
                        st.st_mode & 0o7777,
                        st.st_uid,
                        st.st_size if plain else 0,
                        st.st_mtime_ns if plain else 0,
                    )
                    if not plain and os.path.join(mount, path) not in self.mounts:
                        subdirs.append(entry.name)
        return subdirs

    def reset_writable(self) -> list[str]:
        """Delete what a command added; returns baseline entries it changed or removed, and
        what could not be deleted (either gets the container replaced)."""
        changed: list[str] = []
        for mount in self.writable:
            base = f"/proc/{self.init}/root{mount}"
            before = self.snapshot[mount]
            now = self._walk(mount)
            for rel in sorted(set(now) - set(before)):
                parent = os.path.dirname(rel)
                if parent and parent not in before:
                    continue  # beneath a new directory: goes with it
                # The parent is in the baseline (the image's own, shallow); the new entry
                # may be thousands of levels deep: removed by fd, never by path.
                with contextlib.suppress(OSError):  # found by the walk after: replaced
                    pfd = open_dir(os.path.join(base, parent))
                    try:
                        remove_entry(os.path.basename(rel), pfd, now[rel].kind == 0o040000)
                    finally:
                        os.close(pfd)
            changed += [f"{mount}/{rel}" for rel, entry in before.items() if now.get(rel) != entry]
            try:
                left = sorted(set(self._walk(mount)) - set(before))
            except OSError as err:  # moved while read: something still runs there
                left = [f"(not readable after the reset: {err.strerror or err})"]
            changed += [f"{mount}/{rel} (could not be deleted)" for rel in left[:1]]
        return changed

    def reset_ipc(self) -> str | None:
        """Remove every SysV IPC object of the container's IPC namespace; None when done."""
        if ipc_objects(self.init) == 0:
            # Nothing to remove, read from the namespace itself: the `nsenter ... ipcrm` below
            # is two programs started per command (~3 ms of a served warm call's 80 quiet,
            # more under load: profiled 2026-12-03). Read after the command's processes
            # were killed, so nothing of it can make one after the look.
            return None
        done = subprocess.run(
            ["nsenter", "-t", str(self.init), "--ipc", "--", "ipcrm", "--all"],
            capture_output=True,
            text=True,
            check=False,
        )
        return None if done.returncode == 0 else (done.stderr.strip() or "ipcrm failed")


def ipc_objects(init: int) -> int | None:
    """How many SysV IPC objects (shared memory, semaphore sets, message queues) the IPC
    namespace of host pid `init` holds; None when it can't be read (then ipcrm runs).

    /proc/sysvipc/* lists the namespace of the thread that opens it, so a thread of our
    own joins the container's (setns: one thread's namespace, allowed in a threaded
    process for IPC, unlike mount/user), reads, and ends -- the rest of the process never
    leaves its own."""
    found: list[int | None] = [None]

    def look() -> None:
        try:
            fd = os.open(f"/proc/{init}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # the init is gone: the caller's baseline check sees that
            return
        try:
            if _libc().setns(fd, _CLONE_NEWIPC) != 0:
                return  # not allowed here (no CAP_SYS_ADMIN over it): ipcrm tries
        finally:
            os.close(fd)
        count = 0
        for kind in ("shm", "sem", "msg"):
            try:
                with open(f"/proc/sysvipc/{kind}", "rb") as listing:
                    count += max(0, len(listing.read().splitlines()) - 1)  # a header line
            except OSError:  # a kernel without SysV IPC in procfs: can't tell
                return
        found[0] = count

    thread = threading.Thread(target=look, name="sprawl-ipc-look", daemon=True)
    thread.start()
    thread.join()
    return found[0]


_CLONE_NEWIPC = 0x08000000  # <linux/sched.h>


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


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
