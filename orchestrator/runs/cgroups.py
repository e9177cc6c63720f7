"""Per-run cgroups on Linux (design §11, seed D29/D33): equal CPU shares and a memory ceiling.

`delegation()` is the one reading of whether this machine gives runs cgroups of their own
(`platform_shares()` is its short answer; doctor and the backlog read the same thing). The
cgroup root and the text of /proc/self/cgroup are parameters, so every path below is tested
against a temporary directory tree as well as the real /sys/fs/cgroup.

- **v2** (a unified mount at the root with controllers): our own cgroup is the `0::` line of
  /proc/self/cgroup. Delegated when its `cgroup.procs` and `cgroup.subtree_control` open for
  writing. On first use we move ourselves into a child `core` (v2's no-internal-processes rule:
  a cgroup with processes can't hand controllers to children), enable `+cpu +memory` in the
  parent's subtree_control, then make `run-<session>.<run>` children: `cpu.weight` 100 for all,
  `memory.max` the limit (or "max"). The count read is `memory.events` `oom` -- never `max`,
  which also moves when reclaim succeeded and no allocation failed.
- **v1** (these project machines: /sys/fs/cgroup/memory and /cpu writable by root, the v2 mount
  at /sys/fs/cgroup/unified without controllers): below our own cgroup in each hierarchy,
  `sprawl-orch/<session>/run-<run>`; `cpu.shares` 1024 for all, `memory.limit_in_bytes` (and
  `memory.memsw.limit_in_bytes`, so swap is no way round it). v1 has no internal-process rule,
  so nobody moves. The count read is `memory.oom_control` `oom_kill`.

Every directory made here (a run's, and v1's `sprawl-orch/<session>`) is announced to the
guardian (`watcher.cgroup`) before mkdir and taken back once removed, so a SIGKILLed
orchestrator leaves none behind (design §4). `sprawl-orch` itself is shared between sessions and
v2's `core` holds us (and the guardian we start): neither is announced.

Checking writability is a dry open for writing (no O_CREAT, nothing written): the permission
bits cgroupfs reports don't answer "would a write be refused" (seed D33, rejected ③).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Literal

from sprawl_orch.runs.cgroup_run import RunGroup
from sprawl_orch.runs.launch import NullWatcher, Watcher
from sprawl_orch.runs.shares import Shares

DEFAULT_ROOT = Path("/sys/fs/cgroup")
RUN_CPU_WEIGHT = 100  # v2 cpu.weight: the same for every run
RUN_CPU_SHARES = 1024  # v1 cpu.shares: the same for every run
NOT_DELEGATED_PHRASE = (
    "runs' commands compete thread by thread and run below the core: the cgroup is not delegated"
)


class PlatformShares(StrEnum):
    NONE = "none"
    CPU = "cpu"
    CPU_AND_MEMORY = "cpu_and_memory"


@dataclass(frozen=True)
class Delegation:
    """What the machine gives runs, and where: the one reading (seed `platform_shares`)."""

    shares: PlatformShares
    version: Literal["v1", "v2"] | None
    # v2: {"unified": our cgroup}; v1: {"memory": ..., "cpu": ...} -- our cgroups, writable.
    parents: dict[str, Path] = field(default_factory=dict)
    why: str = ""
    # Our cgroup's path per hierarchy, as /proc/<pid>/cgroup spells it.
    relative: dict[str, str] = field(default_factory=dict)
    # False off Linux: no per-run ceiling exists at all (why = platform, not not_delegated).
    platform_has_cgroups: bool = True


def _own_cgroups(text: str) -> dict[str, str]:
    """controller -> path from /proc/self/cgroup text; the v2 line is keyed "unified"."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            own["unified"] = path
        for name in controllers.split(","):
            if name:
                own[name] = path
    return own


def _opens_for_writing(path: Path) -> str | None:
    """None when `path` opens for writing without creating or writing; else why not."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as err:
        return f"{path}: {err.strerror or err}"
    os.close(fd)
    return None


def _controllers(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        # no controllers file (v1, or removed): none delegated
        return set()


def delegation(
    root: Path = DEFAULT_ROOT, self_cgroup: str | None = None, platform: str = sys.platform
) -> Delegation:
    """Read, without changing anything, whether runs can get cgroups here."""
    if not platform.startswith("linux"):
        return Delegation(
            PlatformShares.NONE, None, why=f"{platform} has no cgroups", platform_has_cgroups=False
        )
    if self_cgroup is None:
        try:
            self_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError as err:
            return Delegation(PlatformShares.NONE, None, why=f"/proc/self/cgroup: {err}")
    own = _own_cgroups(self_cgroup)
    if (root / "cgroup.controllers").exists():
        return _v2(root, own)
    return _v1(root, own)


def _v2(root: Path, own: dict[str, str]) -> Delegation:
    rel = own.get("unified")
    if rel is None:
        return Delegation(PlatformShares.NONE, "v2", why="/proc/self/cgroup has no 0:: line")
    parent = root / rel.lstrip("/")
    if parent.name == "core" and parent.parent != root:
        # We (or the serve that started us) already moved into core: the parent is the one above.
        parent, rel = parent.parent, rel.rsplit("/", 1)[0] or "/"
    problems = [
        p
        for p in (
            _opens_for_writing(parent / "cgroup.procs"),
            _opens_for_writing(parent / "cgroup.subtree_control"),
        )
        if p
    ]
    if problems:
        return Delegation(
            PlatformShares.NONE, "v2", why=f"{NOT_DELEGATED_PHRASE} ({'; '.join(problems)})"
        )
    have = _controllers(parent / "cgroup.controllers")
    if "cpu" not in have:
        return Delegation(
            PlatformShares.NONE,
            "v2",
            why=f"{NOT_DELEGATED_PHRASE} (the cpu controller is not available in {parent})",
        )
    shares = PlatformShares.CPU_AND_MEMORY if "memory" in have else PlatformShares.CPU
    return Delegation(
        shares,
        "v2",
        {"unified": parent},
        why=f"cgroup v2: {parent} is delegated ({', '.join(sorted(have))})",
        relative={"unified": rel},
    )


def _v1(root: Path, own: dict[str, str]) -> Delegation:
    parents: dict[str, Path] = {}
    problems: list[str] = []
    for name in ("cpu", "memory"):
        if name not in own or not (root / name).is_dir():
            problems.append(f"no v1 {name} hierarchy at {root / name}")
            continue
        parent = root / name / own[name].lstrip("/")
        problem = _opens_for_writing(parent / "cgroup.procs")
        if problem:
            problems.append(problem)
        else:
            parents[name] = parent
    if "cpu" not in parents:
        return Delegation(
            PlatformShares.NONE,
            "v1" if parents else None,
            why=f"{NOT_DELEGATED_PHRASE} ({'; '.join(problems)})",
        )
    shares = PlatformShares.CPU_AND_MEMORY if "memory" in parents else PlatformShares.CPU
    where = ", ".join(f"{k} at {v}" for k, v in sorted(parents.items()))
    return Delegation(
        shares,
        "v1",
        parents,
        why=f"cgroup v1: writable {where}",
        relative={k: own[k] for k in parents},
    )


def platform_shares(root: Path = DEFAULT_ROOT, self_cgroup: str | None = None) -> PlatformShares:
    return delegation(root, self_cgroup).shares


def safe_name(run: str) -> str:
    """A run name as one cgroup directory name; distinct runs never share one."""
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", run):
        return run
    digest = hashlib.sha256(run.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', run)[:40]}-{digest}"


def write_value(path: Path, value: str) -> None:
    """One write(2) of the whole value, as cgroupfs wants (a shell `echo V > F` does the same)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class CgroupRefused(Exception):
    """The cgroup would not take a run or its limit; the message is the platform's words."""


class Cgroups:
    """The run cgroups of one session, below our own cgroup(s)."""

    def __init__(
        self,
        found: Delegation,
        session: str,
        *,
        pid: int | None = None,
        rmdir: Callable[[Path], None] = os.rmdir,
        watcher: Watcher | None = None,
    ) -> None:
        self.found = found
        self.watcher = watcher or NullWatcher()
        self.session = safe_name(session)
        self.pid = os.getpid() if pid is None else pid
        self._rmdir = rmdir
        self._adopted: bool | None = None
        self._adopt_error = ""
        self._made: list[Path] = []  # directories we created, parents first
        self._lock = threading.RLock()

    @property
    def version(self) -> str | None:
        return self.found.version

    def _adopt(self) -> None:
        """v2 only, once: move ourselves into `core` and hand cpu (+memory) to children."""
        if self._adopted is not None:
            if not self._adopted:
                raise CgroupRefused(self._adopt_error)
            return
        parent = self.found.parents["unified"]
        try:
            core = parent / "core"
            if not core.is_dir():
                core.mkdir()
                self._made.append(core)
            write_value(core / "cgroup.procs", f"{self.pid}\n")
            memory = self.found.shares is PlatformShares.CPU_AND_MEMORY
            wanted = "+cpu +memory" if memory else "+cpu"
            write_value(parent / "cgroup.subtree_control", wanted)
        except OSError as err:
            self._adopted = False
            why = "other processes still live in it" if err.errno == errno.EBUSY else ""
            self._adopt_error = f"{err.filename or parent}: {err.strerror or err} {why}".strip()
            raise CgroupRefused(self._adopt_error) from err
        self._adopted = True

    def _mkdirs(self, base: Path, parts: list[str]) -> Path:
        path = base
        for part in parts:
            path = path / part
            if not path.is_dir():
                told = part != "sprawl-orch"
                if told:
                    self.watcher.cgroup(path)
                try:
                    path.mkdir()
                except OSError:
                    if told:
                        self.watcher.cgroup_gone(path)
                    raise
                self._made.append(path)
        return path

    def _rmdir_told(self, path: Path) -> None:
        """rmdir, then take the announcement back (also when it was already gone)."""
        # gone already: the announcement is taken back all the same
        with contextlib.suppress(FileNotFoundError):
            self._rmdir(path)
        self.watcher.cgroup_gone(path)

    def create(self, run: str, asked: Shares) -> RunGroup:
        """Make the run's cgroup(s) and write its shares; raise CgroupRefused, leaving nothing."""
        assert asked.kind != "unset"
        with self._lock:
            made_before = len(self._made)
            try:
                return self._create(run, asked)
            except (OSError, CgroupRefused) as err:
                for path in reversed(self._made[made_before:]):
                    # undoing a half-made run; the create's own error is the one reported
                    with contextlib.suppress(OSError):
                        self._rmdir_told(path)
                del self._made[made_before:]
                if isinstance(err, CgroupRefused):
                    raise
                where = getattr(err, "filename", None) or "cgroup"
                raise CgroupRefused(f"{where}: {err.strerror or err}") from err

    def _create(self, run: str, asked: Shares) -> RunGroup:
        limit = asked.limit_bytes
        if limit is not None and self.found.shares is not PlatformShares.CPU_AND_MEMORY:
            raise CgroupRefused("the memory controller is not delegated to us")
        name = f"run-{safe_name(run)}"
        if self.found.version == "v2":
            self._adopt()
            parent = self.found.parents["unified"]
            path = self._mkdirs(parent, [f"run-{self.session}.{safe_name(run)}"])
            write_value(path / "cpu.weight", str(RUN_CPU_WEIGHT))
            if self.found.shares is PlatformShares.CPU_AND_MEMORY:
                # CPU-only writes "max": a reused directory must not keep an old limit.
                write_value(path / "memory.max", str(limit) if limit else "max")
                if limit and (path / "memory.swap.max").exists():
                    write_value(path / "memory.swap.max", "0")
            rel = self.found.relative["unified"].rstrip("/") + "/" + path.name
            return RunGroup(run, "v2", {"unified": path}, held=asked, relative={"unified": rel})
        dirs: dict[str, Path] = {}
        rels: dict[str, str] = {}
        wanted = ["cpu", "memory"] if limit else ["cpu"]
        for hierarchy in wanted:
            base = self.found.parents[hierarchy]
            path = self._mkdirs(base, ["sprawl-orch", self.session, name])
            dirs[hierarchy] = path
            rels[hierarchy] = "/".join(
                (self.found.relative[hierarchy].rstrip("/"), "sprawl-orch", self.session, name)
            )
        write_value(dirs["cpu"] / "cpu.shares", str(RUN_CPU_SHARES))
        if limit:
            write_value(dirs["memory"] / "memory.limit_in_bytes", str(limit))
            if (dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                write_value(dirs["memory"] / "memory.memsw.limit_in_bytes", str(limit))
        return RunGroup(run, "v1", dirs, held=asked, relative=rels)

    def remove(self, group: RunGroup) -> str | None:
        """Kill what is left in the run's cgroup(s) and remove them; None, or what stayed."""
        left = group.empty_and_remove(self._rmdir)
        for path in group.dirs.values():
            if not path.exists():
                self.watcher.cgroup_gone(path)
        with self._lock:
            self._made = [p for p in self._made if p.exists()]
        return left

    def close(self) -> str | None:
        """Remove every directory we made (deepest first). v2: `core` stays while we live in
        it (moving back out would break the parent's subtree_control); it is empty, and removed,
        once we are gone. Never raises; returns what stayed."""
        stayed: list[str] = []
        with self._lock:
            for path in reversed(self._made):
                if self.found.version == "v2" and path.name == "core":
                    continue  # we live in it
                try:
                    self._rmdir_told(path)
                except OSError as err:
                    # `sprawl-orch` is shared with other sessions.
                    if path.name != "sprawl-orch":
                        stayed.append(f"{path}: {err.strerror or err}")
            self._made = [p for p in self._made if p.exists()]
            if self.found.version == "v1":
                # Another session may have made it; the last one out removes it.
                for parent in self.found.parents.values():
                    # EBUSY: another session still uses the shared parent (last one out removes)
                    with contextlib.suppress(OSError):
                        self._rmdir(parent / "sprawl-orch")
        return "; ".join(stayed) or None
