"""Persistent copies (design §5): one per working directory and config, kept between CLI calls.

Layout under the store root, ``<state dir>/copies``::

    <key>/             key: hash of the working directory's real path and the [sandbox] config
      0/  1/  ...      slots: a concurrent call takes another one
        lock           flock(2)ed by the one command that holds the slot
        tree/          the copy itself (Lease.path: mount it, chown it, run in it)
        stamps         its stamp record (copy_stamps), beside the copy where no command writes
        meta.json      working directory, bytes synced, when it was last released

One command at a time holds a slot: ``lease`` takes the first slot whose lock it can get
without waiting (``flock(LOCK_EX | LOCK_NB)``; on Windows ``msvcrt.locking(LK_NBLCK)``),
making a new slot when all are busy. The lock fd is
close-on-exec, so no command inherits it; when the holder dies -- even by SIGKILL -- the
kernel drops the lock, and the next call finds the copy as it was left and resyncs it (the
sync is exact whatever state a killed call left, copy_stamps). Nothing has to delete a
persistent copy when a call dies: the guardian releases nothing and deletes nothing here.

Eviction: after each release, idle slots are deleted oldest-release first while the store
holds more than ``[sandbox.copy] budget_bytes`` (the slot just released is kept). A slot's
size is what its last sync copied (meta.json); files a command added to its copy are counted
by the next sync, which deletes them. ``sprawl-orch copies list|drop`` (cli/copies_cmd) shows
and deletes them by hand.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.memory import CopyMemory
from sprawl_orch.copy.sync import FileWork, sync_with_record
from sprawl_orch.copy.walk import Progress
from sprawl_orch.core.budget import evict_oldest
from sprawl_orch.core.credential_places import Guard
from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors
from sprawl_orch.core.private import private_dirs
from sprawl_orch.core.removal import delete_path

TREE, STAMPS, LOCK, META = "tree", "stamps", "lock", "meta.json"


def copy_key(workdir: Path, config_json: str) -> str:
    """The store key of a working directory (resolved) under one config (its JSON)."""
    real = os.path.realpath(workdir)
    digest = hashlib.sha256(f"{real}\0{config_json}".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:20]


if sys.platform == "win32":
    import msvcrt

    def _try_lock(fd: int) -> bool:
        # One byte, non-blocking; released when the fd closes or the process dies, like flock.
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


TOKEN_SIZE = 32  # hex characters of a lease token


def _lock(path: Path, lease: bool = False) -> tuple[int, str | None] | None:
    """An fd holding an exclusive lock on ``path`` (made if missing) and the lease token the
    previous holder left in it, or None if it is held.

    Every lease of a slot (the exec server's calls, the in-process CLI, the library, another
    server: all through CopyStore.lease) leaves a fresh random token in the lock file: a
    memory of the copy's side (copy/memory.py) is trusted only by the lease that finds the
    token of the lease it was made under, so no holder that could write the copy came
    between (design §5.1). `copies list` and eviction's look (``lease`` False) only test
    whether a slot is busy and write nothing (eviction runs after every release: a token
    there voided every memory); `copies drop` deletes the copy, which voids it by the root's
    identity. An older sprawl-orch writes no token: the stamp record's MAGIC moved so that
    its syncs void the memory anyway (copy/stamps.py)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        locked = _try_lock(fd)
    except BaseException:
        os.close(fd)
        raise
    if not locked:
        os.close(fd)
        return None
    try:
        # Evicted between our open and our lock: the file we locked is no longer the slot's.
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            raise FileNotFoundError(path)
    except FileNotFoundError:
        os.close(fd)
        return None
    if not lease:
        return fd, None
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        found = os.read(fd, TOKEN_SIZE + 1).decode("ascii", "replace")
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, secrets.token_hex(TOKEN_SIZE // 2).encode())
    except BaseException:
        os.close(fd)
        raise
    return fd, (found if len(found) == TOKEN_SIZE else None)


def token_of(fd: int) -> str:
    """The token the holder of ``fd`` left (what the next holder will find)."""
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, TOKEN_SIZE).decode("ascii", "replace")


@dataclass
class Lease:
    """One slot, held by one command until ``release``. ``path`` is the copy (a plain Path)."""

    slot: Path
    workdir: Path
    _fd: int | None
    # The token the previous holder left (None: none, or an older version's slot) and this
    # lease's own: a memory made under this lease carries ``token`` (copy/memory.py).
    found_token: str | None = None
    token: str = ""
    # The stamp record the last sync wrote (changes: the source stamps it read).
    last_record: copy_stamps.SyncRecord | None = None

    @property
    def path(self) -> Path:
        return self.slot / TREE

    @property
    def record_path(self) -> Path:
        return self.slot / STAMPS

    def sync(
        self,
        source: Path,
        bounds: Bounds,
        excludes: Excludes,
        progress: Progress | None = None,
        guard: Guard | None = None,
        memory: CopyMemory | None = None,
    ) -> FileWork:
        """Resync the copy to ``source``; over a bound the copy and its record are deleted.
        ``memory``: of the copy's side, let through by copy.memory.gate for this lease."""
        work, record = sync_with_record(
            source,
            self.path,
            bounds,
            record=self.record_path,
            excludes=excludes,
            progress=progress,
            guard=guard,
            memory=memory,
        )
        self._meta(record.total_bytes)
        self.last_record = record
        return work

    def _meta(self, size: int | None = None) -> None:
        meta = self.slot / META
        old = _read_meta(self.slot)
        kept = old.get("bytes", 0)
        if size is not None and size == kept and old.get("workdir") == str(self.workdir):
            # A resync that left the size as on file (an unchanged tree, every served call):
            # release() writes the release time -- one write and rename a call, not two
            # (issue 26; a rename took 3 ms under load). Killed before it, the slot keeps the
            # last release's time, as an idle copy's should.
            return
        synced = size if size is not None else kept if isinstance(kept, int) else 0
        data = {"workdir": str(self.workdir), "bytes": synced, "released": time.time()}
        tmp = meta.with_name(META + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, meta)

    def release(self) -> None:
        """Give the slot back (idempotent); the copy stays for the next call."""
        if self._fd is None:
            return
        # A refused or failed sync deleted the copy (copy_sync: the half-synced copy goes):
        # its lock and meta.json alone showed in `copies list` as a 0 B copy (issue 27).
        empty = not os.path.lexists(self.path)
        try:
            if empty:
                # half-removed bookkeeping of an empty slot is swept by the next release
                with contextlib.suppress(OSError):
                    _unlink_bookkeeping(self.slot)
            else:
                # meta.json is bookkeeping only: a copy without it is still found by its stamps
                with contextlib.suppress(OSError):
                    self._meta()
        finally:
            os.close(self._fd)
            self._fd = None
        if empty:
            _remove_slot_dirs(self.slot)


def _unlink_bookkeeping(slot: Path) -> None:
    """Delete a slot's files but its copy, the lock last (held by the caller)."""
    copy_stamps.forget(slot / STAMPS)
    for name in (META, META + ".tmp"):
        # already gone: forgetting a slot twice is the same as once
        with contextlib.suppress(FileNotFoundError):
            (slot / name).unlink()
    if sys.platform != "win32":  # Windows cannot unlink a file we hold open
        (slot / LOCK).unlink()


def _remove_slot_dirs(slot: Path) -> None:
    """After the lock was closed: the slot and, if it was the last, its key's directory."""
    # the slot or key directory still holds another's entries: left for its owner
    with contextlib.suppress(OSError):
        if sys.platform == "win32":
            (slot / LOCK).unlink()
        slot.rmdir()  # a lease racing us may have made a new lock here: then it stays
        slot.parent.rmdir()  # the last slot of its key


def _read_meta(slot: Path) -> dict[str, object]:
    try:
        data = json.loads((slot / META).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class CopyInfo:
    """One slot as ``copies list`` shows it."""

    key: str
    slot: Path
    workdir: str
    bytes: int
    released: float
    busy: bool

    @property
    def name(self) -> str:
        return f"{self.key}/{self.slot.name}"


class CopyStore:
    def __init__(self, root: Path, budget_bytes: int) -> None:
        self.root = Path(root)
        self.budget_bytes = budget_bytes

    def lease(self, workdir: Path, key: str) -> Lease:
        """The first free slot of ``key`` (a new one when all are held)."""
        group = self.root / key
        with os_errors(
            ErrorCode.STORAGE_FATAL,
            self.root,
            "cannot keep a copy there",
            "make the state directory writable, or set [state] dir",
        ):
            private_dirs(group)
            for n in range(100_000):
                slot = group / str(n)
                with contextlib.suppress(FileExistsError):
                    slot.mkdir(mode=0o700)
                held = _lock(slot / LOCK, lease=True)
                if held is not None:
                    fd, found = held
                    return Lease(slot, Path(workdir), fd, found_token=found, token=token_of(fd))
        raise SprawlError(
            ErrorCode.STORAGE_FATAL,
            str(group),
            "100 000 slots are all held",
            "drop copies with: sprawl-orch copies drop --all",
        )

    def slots(self) -> Iterator[Path]:
        with contextlib.suppress(FileNotFoundError):
            for group in sorted(self.root.iterdir()):
                if group.is_dir() and not group.is_symlink():
                    for slot in sorted(group.iterdir()):
                        if slot.is_dir() and not slot.is_symlink():
                            yield slot

    def info(self) -> list[CopyInfo]:
        out = []
        for slot in self.slots():
            held = _lock(slot / LOCK)
            if held is not None:
                os.close(held[0])
            meta = _read_meta(slot)
            size, released = meta.get("bytes"), meta.get("released")
            out.append(
                CopyInfo(
                    slot.parent.name,
                    slot,
                    str(meta.get("workdir", "?")),
                    size if isinstance(size, int) else _du(slot / TREE),
                    released if isinstance(released, float) else 0.0,
                    held is None,
                )
            )
        return out

    def drop(self, slot: Path) -> bool:
        """Delete one idle slot; False if a command holds it."""
        try:
            held = _lock(slot / LOCK)
        except FileNotFoundError:
            return False
        if held is None:
            return False
        fd = held[0]
        try:
            delete_path(slot / TREE)
            _unlink_bookkeeping(slot)
        finally:
            os.close(fd)
        _remove_slot_dirs(slot)
        return True

    def evict(self, keep: Path | None = None) -> list[CopyInfo]:
        """Drop idle slots, least recently released first, until within the budget."""
        return evict_oldest(
            self.info(),
            self.budget_bytes,
            size=lambda s: s.bytes,
            age=lambda s: s.released,
            spare=lambda s: s.busy or s.slot == keep,
            drop=lambda s: self.drop(s.slot),
        )


def _du(path: Path) -> int:
    total = 0
    for here, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(here, name)).st_size
    return total
