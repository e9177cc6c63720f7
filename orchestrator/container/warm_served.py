"""Warm containers across one-shot CLI calls (issue 26; docs/warm.md): the pool of a call
forked from the exec server, whose kept containers outlive the call and are owned by the
server (core/served_warm.py: one guardian connection per container, held by the server).

What the library's WarmPool does (warm.py) stays as it is -- the checks before reuse, the
reset after each command, the replacement and what the result says; only where an idle
container waits differs: in the server's table, not in this process. A call with an
allow-list (egress) or whose guardian is not the state directory's shared one keeps its
container to itself, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from sprawl_orch.container.argv import container_name
from sprawl_orch.container.warm import WarmPool
from sprawl_orch.container.warm_freeze import Freezer
from sprawl_orch.container.warm_host import Entry, HostView
from sprawl_orch.container.warm_run import Warm
from sprawl_orch.core import served_warm
from sprawl_orch.core.exec_place import runtime_dir
from sprawl_orch.runs.launch import Launch, Watcher

# The endpoints that choose which daemon a container lives on (a kept container of one
# daemon is no container of another).
ENDPOINTS = ("DOCKER_HOST", "DOCKER_CONTEXT", "CONTAINER_HOST", "CONTAINERS_CONF")


class ServedWarmPool(WarmPool):
    def __init__(self, arm: Any) -> None:
        super().__init__(arm)
        self._locks: dict[str, int] = {}  # name -> our lock file's fd (flock held)
        self._gens: dict[str, int] = {}
        self._sessions: dict[str, str] = {}  # name -> its guardian connection's session

    # -- which calls keep their containers in the server --------------------------------
    @staticmethod
    def _shared(launch: Launch) -> bool:
        watcher = launch.watcher
        return (
            served_warm.served()
            and launch.egress is None
            and getattr(watcher, "socket_path", None) is not None
            and callable(getattr(watcher, "sibling", None))
        )

    def _key(self, launch: Launch) -> str:
        """Everything that decides what the container is (verify.py checks it again)."""
        admission = self.arm.admission()
        copy = launch.cwd.resolve()
        st = os.stat(copy)
        parts = [
            os.getuid(),
            os.geteuid(),
            self.arm.engine.name,
            {k: os.environ.get(k) for k in ENDPOINTS},
            str(admission.runtime_used),
            str(admission.image),
            repr(admission.userns),
            repr(admission.seccomp),
            self.arm.config.model_dump(mode="json"),
            str(copy),
            st.st_dev,
            st.st_ino,  # a slot evicted and made again is a directory the old bind can't see
            str(launch.workdir),
            str(getattr(launch.watcher, "socket_path", "")),  # the state directory's guardian
        ]
        text = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    # -- taking one ------------------------------------------------------------------------
    def _take(self, launch: Launch) -> Warm | None:
        if not self._shared(launch):
            served_warm.keep_only(None)
            return super()._take(launch)
        warm = self._take_kept(launch)
        served_warm.keep_only(None if warm is None else warm.name)
        return warm

    def _take_kept(self, launch: Launch) -> Warm | None:
        key = self._key(launch)
        for name, entry in served_warm.offers(key):
            assert entry.record is not None
            fd = _lock(name)
            if fd is None:
                continue  # another call holds it now
            if _said(fd) != f"clean {entry.generation}":
                os.close(fd)  # its last holder died mid-command, or gave it back since
                continue
            _say(fd, "busy")
            served_warm.take(name)
            self._locks[name], self._gens[name] = fd, entry.generation
            session = str(entry.record["session"])
            self._sessions[name] = session
            watcher = launch.watcher.sibling(session, entry.fd)  # type: ignore[attr-defined]
            return decode(entry.record, watcher, launch.run)
        return None

    def _make(self, launch: Launch) -> Warm:
        if not self._shared(launch):
            return super()._make(launch)
        session = f"{launch.session}-warm"
        link: Watcher = launch.watcher.sibling(session)  # type: ignore[attr-defined]
        owned = dataclasses.replace(launch, session=session, watcher=link)
        name = container_name(owned.tag)
        fd = _lock(name)
        try:
            if fd is None:
                raise OSError(f"the lock of a new warm container {name} is held")
            # before the container exists: its owner is the server from the first byte
            served_warm.hold(name, self._key(launch), link.link())  # type: ignore[attr-defined]
        except OSError:
            # no connection of its own to the guardian, or no way to the server: this
            # call's container is its own, made and removed by it as before
            if fd is not None:
                os.close(fd)
            return super()._make(launch)
        _say(fd, "busy")
        self._locks[name], self._gens[name] = fd, 0
        self._sessions[name] = session
        try:
            warm = super()._make(owned)
        except BaseException:
            self._let_go(name, drop=True)
            raise
        return warm

    # -- giving it back ----------------------------------------------------------------------
    def release(self, warm: Warm) -> None:
        fd = self._locks.get(warm.name)
        if fd is None:
            super().release(warm)
            return
        generation = self._gens.get(warm.name, 0) + 1
        _say(fd, f"clean {generation}")
        try:
            served_warm.back(warm.name, generation, encode(warm, self._sessions[warm.name]))
        except OSError:  # the server died meanwhile (ECONNRESET): no one keeps it; removed now
            self.remove(warm)
            return
        self._let_go(warm.name, drop=False)

    def remove(self, warm: Warm) -> str | None:
        left = super().remove(warm)
        if warm.name in self._locks:
            self._let_go(warm.name, drop=True)
        return left

    def _let_go(self, name: str, drop: bool) -> None:
        if drop:
            with contextlib.suppress(OSError):  # the server is gone: nothing to tell it
                served_warm.drop(name)
            # a call that opened it meanwhile locks a name no one holds: it reads no `clean`
            with contextlib.suppress(FileNotFoundError):  # never made, or removed already
                os.unlink(_lock_place() / f"{name}.lock")
        fd = self._locks.pop(name, None)
        self._gens.pop(name, None)
        self._sessions.pop(name, None)
        if fd is not None:
            os.close(fd)


def _lock_place() -> Path:
    place = runtime_dir(dict(os.environ)) / "warm"
    place.mkdir(mode=0o700, exist_ok=True)
    return place


def _lock(name: str) -> int | None:
    try:
        fd = os.open(
            _lock_place() / f"{name}.lock",
            os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o600,
        )
    except OSError:  # replaced by a link (ELOOP), made unreadable (EACCES): not one to take
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another call holds it now: it is not ours to take
        os.close(fd)
        return None
    return fd


def _said(fd: int) -> str:
    return os.pread(fd, 64, 0).decode(errors="replace").strip()


def _say(fd: int, word: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{word}\n".encode(), 0)


# -- a kept container as JSON (no pickle: served_memo.py) -----------------------------------
def encode(warm: Warm, session: str) -> dict[str, object]:
    host = warm.host
    return {
        "session": session,
        "container": warm.container,
        "name": warm.name,
        "copy": str(warm.copy),
        "workdir": warm.workdir,
        "record": warm.record,
        "owner": list(warm.owner),
        "source": None if warm.source is None else str(warm.source),
        "commands": warm.commands,
        "host": {
            "init": host.init,
            "baseline": sorted([p, t] for p, t in host.baseline),
            "pidns": host.pidns,
            "procs_files": [str(p) for p in host.procs_files],
            "oom_file": None if host.oom_file is None else str(host.oom_file),
            "writable": list(host.writable),
            "mounts": sorted(host.mounts),
            "snapshot": {
                m: {p: list(dataclasses.astuple(e)) for p, e in entries.items()}
                for m, entries in host.snapshot.items()
            },
            "freezer": None
            if host.freezer is None
            else [host.freezer.version, str(host.freezer.path)],
        },
    }


def decode(data: dict[str, Any], watcher: Watcher, run: str) -> Warm:
    h = data["host"]
    freezer = None if h["freezer"] is None else Freezer(h["freezer"][0], Path(h["freezer"][1]))
    host = HostView(
        int(h["init"]),
        frozenset((int(p), float(t)) for p, t in h["baseline"]),
        int(h["pidns"]),
        tuple(Path(p) for p in h["procs_files"]),
        None if h["oom_file"] is None else Path(h["oom_file"]),
        tuple(h["writable"]),
        frozenset(h["mounts"]),
        {m: {p: Entry(*e) for p, e in entries.items()} for m, entries in h["snapshot"].items()},
        freezer,
    )
    owner = data["owner"]
    warm = Warm(
        data["container"],
        data["name"],
        Path(data["copy"]),
        run,
        data["workdir"],
        watcher,
        host,
        dict(data["record"]),
        (int(owner[0]), int(owner[1])),
    )
    warm.source = None if data["source"] is None else Path(data["source"])
    warm.commands = int(data["commands"])
    return warm
