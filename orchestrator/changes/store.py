"""Kept changes: a finished command's changed files, on disk until applied or dropped (design §5).

``<state>/changes/<handle>/`` holds ``changes.json`` (every change, the source stamps taken
before the sync, the hashes of racy files, where each file's new bytes are) and ``blobs/`` (the
new bytes, copied out of the copy right after the command, so the next sync cannot take them).
It is written under a temporary name and renamed into place whole.

The store is bounded by ``budget`` bytes: keeping a command's changes drops the oldest kept
ones **of the same working directory** until it fits, and the result names what was
dropped. Another working directory's kept changes are another agent's unapplied work: one
command's 900 MB sparse file (its blob is written out whole) evicted every older kept
change of every working directory (issue 30). When they are in the way, the command loses
the keeping of its own changes instead, and its result says so, naming the budget and how
much the other working directories hold. A command whose changes alone are larger than the
budget is not kept either, and its blobs stop being written as soon as they would pass the
budget (a sparse file is written out dense: its size, not the copy's blocks, is what counts).
A dropped or fully applied handle leaves a one-line
``<handle>.gone`` so `apply` can say what happened to it.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sprawl_orch.changes.changes import ChangeEntry, Changes
from sprawl_orch.changes.record import SyncRecord
from sprawl_orch.core.beneath import NotBeneath, open_file_beneath, parts_of
from sprawl_orch.core.budget import drop_entry, evict_oldest
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.private import private_dirs, private_file
from sprawl_orch.core.protected import Protection, under_git, vcs_state
from sprawl_orch.core.removal import delete_quietly

BUDGET = 1024 * 1024 * 1024
# Bytes of the host's disk one kept entry costs besides its content, counted against the
# budget before anything is written: its manifest line (~200 bytes of JSON) and its blob's
# directory entry.
ENTRY_COST = 256
MANIFEST = "changes.json"
_HANDLE_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def changes_root(state: Path) -> Path:
    return state / "changes"


def _check_handle(handle: str) -> None:
    if not handle or handle.startswith(".") or not set(handle) <= _HANDLE_OK:
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            repr(handle),
            "not a command handle",
            "pass the `changes.handle` of a result",
        )


@contextmanager
def locked(root: Path) -> Iterator[None]:
    private_dirs(root)
    with os.fdopen(
        private_file(root / ".lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND), "a"
    ) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Kept:
    """One handle's kept changes, as `apply` reads them."""

    handle: str
    dir: Path
    workdir: Path
    entries: list[ChangeEntry]
    source: dict[str, list[int]]
    hashes: dict[str, str]
    source_trusted_below_ns: int
    blobs: dict[str, str]
    applied: set[str]

    def blob(self, rel: str) -> Path | None:
        name = self.blobs.get(rel)
        return self.dir / "blobs" / name if name else None


def _blocks(path: Path) -> int:
    """Bytes of disk the blobs take (allocated blocks: a 1-byte file costs a block)."""
    total = 0
    with os.scandir(path) as listing:
        for entry in listing:
            with suppress(OSError):  # our own temp store, nobody else writes it: never seen
                total += entry.stat(follow_symlinks=False).st_blocks * 512
    with suppress(OSError):  # the same: made by keep() a moment ago
        total += os.lstat(path).st_blocks * 512
    return total


class _OverBudget(Exception):
    """A blob would pass the changes budget: the keeping stops before writing it."""


def _copy_blob(copy_fd: int, rel: str, dest: Path, room: int) -> int:
    """Copy one file's new bytes, at most `room` of them. Checked while copying, not after:
    a sparse file costs the copy nothing but its blob is written out dense, and a 256 MiB
    hole was written whole onto the host's disk before the budget was compared (issue 30
    break 4, attacked again); the size is read from the open file, and the copy stops at
    `room` in case it grows meanwhile."""
    fd = open_file_beneath(copy_fd, parts_of(rel))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotBeneath(f"{rel} is no longer a regular file")
        src = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with src, os.fdopen(private_file(dest), "wb") as out:
        if st.st_size > room:
            raise _OverBudget
        while chunk := src.read(min(1 << 20, room - out.tell() + 1)):
            if out.tell() + len(chunk) > room:
                raise _OverBudget
            out.write(chunk)
        return out.tell()


def _usage(root: Path) -> list[tuple[float, str, int, str]]:
    """(made, handle, bytes, working directory) of every kept handle, oldest first."""
    kept = []
    for entry in os.scandir(root):
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            with open(Path(entry.path) / MANIFEST) as f:
                head = json.load(f)
            kept.append(
                (float(head["made"]), entry.name, int(head["stored_bytes"]), str(head["workdir"]))
            )
        except (OSError, ValueError, KeyError):
            continue
    return sorted(kept)


def drop(root: Path, handle: str, why: str) -> None:
    """Renamed away first, in one step (core/budget.py): load() never reads a half-deleted
    store; the next sweep finishes a drop killed half-way."""
    drop_entry(root, handle, why)


def _sweep(root: Path) -> None:
    """Remove what killed keeps and drops left: ``.drop-*`` at once (nobody reads them),
    ``.<handle>.<hex>`` temp stores after an hour (a live keep may still be filling one)."""
    stale = time.time() - 3600
    for entry in os.scandir(root):
        if not entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        with suppress(OSError):
            if entry.name.startswith(".drop-") or entry.stat().st_mtime < stale:
                delete_quietly(entry.path)


def keep(
    state: Path,
    handle: str,
    workdir: Path,
    copy: Path,
    record: SyncRecord,
    entries: list[ChangeEntry],
    budget: int = BUDGET,
    protection: Protection | None = None,
) -> Changes:
    """Store ``entries`` under ``handle``; the result's `changes` value. Repository state
    under a `.git` is counted, not kept; every other entry is marked with why it is
    protected, if it is (``protection``; the table alone when None)."""
    _check_handle(handle)
    root = changes_root(state)
    protection = protection or Protection()
    vcs = sum(1 for e in entries if vcs_state(e.path))
    entries = [
        e.model_copy(update={"protected": protection.reason(e.path)})
        for e in entries
        if not vcs_state(e.path)
    ]
    fields: dict[str, Any] = {"handle": handle, "vcs_state": vcs}
    if not entries:
        return Changes.of(entries, **fields)
    private_dirs(root)
    tmp = root / f".{handle}.{secrets.token_hex(4)}"
    private_dirs(tmp / "blobs")
    blobs: dict[str, str] = {}
    lost: list[str] = []
    # What keeping costs beyond the new bytes: a manifest line and a blob file (inode,
    # directory entry) per entry. Counted: 20000 empty files were "0 bytes" against the
    # budget while they left 4.2 MB under changes/ (measured ~210 bytes each).
    stored = ENTRY_COST * len(entries)
    copy_fd = os.open(copy, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, e in enumerate(entries):
            if stored > budget:
                break
            if e.kind != "file" or e.change in ("mode_changed", "deleted") or under_git(e.path):
                continue  # a `.git` entry is never applied: its bytes are not kept
            try:
                stored += _copy_blob(copy_fd, e.path, tmp / "blobs" / str(i), budget - stored)
                blobs[e.path] = str(i)
            except (OSError, NotBeneath):
                lost.append(e.path)
            except _OverBudget:
                stored = budget + 1  # not kept: said below, nothing more written
                break
    finally:
        os.close(copy_fd)
    manifest = {
        "handle": handle,
        "workdir": str(workdir),
        "made": time.time(),
        "stored_bytes": stored,
        # Python mode: the real names (json.dump escapes non-UTF-8 ones as \udcXX and reads
        # them back), not the shown ones the JSON mode gives results.
        "entries": [e.model_dump() for e in entries],
        "source": {
            e.path: list(src) for e in entries if (src := record.source(e.path)) is not None
        },
        "hashes": {e.path: record.hashes[e.path] for e in entries if e.path in record.hashes},
        "source_trusted_below_ns": record.source_line_ns,
        "blobs": blobs,
    }
    if stored <= budget:
        # the manifest is written only when it may be kept, and counted as it is on disk
        text = json.dumps(manifest)
        stored = len(text.encode()) + _blocks(tmp / "blobs")
        manifest["stored_bytes"] = stored
        with os.fdopen(private_file(tmp / MANIFEST), "w") as f:
            json.dump(manifest, f)
    notes = [f"the new bytes of {', '.join(lost)} could not be read"] if lost else []
    dropped: list[str] = []
    with locked(root):
        if stored > budget:
            delete_quietly(tmp)
            notes.append(
                "not kept for apply: the changed files exceed the changes budget of "
                f"{budget} bytes ([state] changes_budget_bytes)"
            )
            return Changes.of(entries, note="; ".join(notes), **fields)
        _sweep(root)
        usage = _usage(root)
        others = sum(u[2] for u in usage if u[3] != str(workdir))
        if others + stored > budget:
            # Room only by dropping other working directories' unapplied changes: never.
            delete_quietly(tmp)
            notes.append(
                f"not kept for apply: {stored} bytes of changed files do not fit the changes "
                f"budget of {budget} bytes ([state] changes_budget_bytes) beside the "
                f"{others} bytes of unapplied changes other working directories keep, "
                "which a command never drops; apply or drop those (`sprawl-orch apply "
                "HANDLE` / `--drop`), or raise the budget"
            )
            return Changes.of(entries, note="; ".join(notes), **fields)
        why = (
            f"dropped at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
            f" to keep {handle} within the changes budget of {budget} bytes"
        )

        def gone_one(u: tuple[float, str, int, str]) -> bool:
            drop(root, u[1], why)
            return True

        gone = evict_oldest(
            usage,
            budget,
            size=lambda u: u[2],
            age=lambda u: u[0],
            spare=lambda u: u[3] != str(workdir),  # another working directory's: never
            drop=gone_one,
            incoming=stored,
        )
        dropped = [u[1] for u in gone]
        os.rename(tmp, root / handle)
    if dropped:
        notes.append(
            f"older kept changes dropped (oldest first) to stay within the budget "
            f"of {budget} bytes: {', '.join(dropped)}"
        )
    return Changes.of(
        entries,
        full=str(root / handle / MANIFEST),
        kept=True,
        note="; ".join(notes) or None,
        dropped=dropped,
        **fields,
    )


def load(state: Path, handle: str) -> Kept:
    _check_handle(handle)
    root = changes_root(state)
    where = root / handle
    try:
        with open(where / MANIFEST) as f:
            m = json.load(f)
    except FileNotFoundError:
        gone = root / f"{handle}.gone"
        why = (
            gone.read_text().strip()
            if gone.exists()
            else "no kept changes have this handle (a command without changes keeps none)"
        )
        raise SprawlError(
            ErrorCode.UNKNOWN_HANDLE, handle, why, "run the command again and apply its new handle"
        ) from None
    applied: set[str] = set()
    with suppress(FileNotFoundError):
        applied = set((where / "applied").read_text(errors="surrogateescape").splitlines())
    return Kept(
        handle,
        where,
        Path(m["workdir"]),
        [ChangeEntry.model_validate(e) for e in m["entries"]],
        m["source"],
        m["hashes"],
        int(m["source_trusted_below_ns"]),
        m["blobs"],
        applied,
    )


def drop_handle(state: Path, handle: str) -> None:
    """Forget a handle's kept changes (`apply --drop`)."""
    _check_handle(handle)
    root = changes_root(state)
    with locked(root):
        if not (root / handle / MANIFEST).exists():
            load(state, handle)  # raises, saying what happened to it
        drop(root, handle, "dropped on request (apply --drop)")


def record_applied(kept: Kept, paths: list[str]) -> None:
    """Record paths as applied, one by one as they land, so an interrupted apply resumes."""
    if not paths:
        return
    with open(kept.dir / "applied", "a", errors="surrogateescape") as f:
        f.write("".join(p + "\n" for p in paths))
        f.flush()
        os.fsync(f.fileno())
    kept.applied.update(paths)


def finish_if_done(kept: Kept) -> bool:
    """When every change is applied the store is removed (True)."""
    if all(e.path in kept.applied or under_git(e.path) for e in kept.entries):
        drop(kept.dir.parent, kept.handle, "every change of it was applied")
        return True
    return False
