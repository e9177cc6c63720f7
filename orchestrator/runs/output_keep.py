"""Bounded host disk for command output (issue 30 break 4, issue 27 items 1 and 2).

A result carries the first OUTPUT_CAP bytes of each stream; a longer stream's full text is
kept in ``<state>/kept-output/<handle>/`` as the way back. Unbounded, that was the host's
disk in the command's hands: `head -c 3221225472 /dev/zero` left a 3 GiB file there and
nothing ever pruned it (81 MB after one day of tests). So:

- per command: each stream keeps at most ``[state] output_keep_bytes`` (the rest is cut
  off the kept file at once, and the result says where it was cut);
- state-wide: ``kept-output/`` holds at most ``[state] output_budget_bytes``; keeping a
  command's output drops the oldest kept outputs first, and that command's result names
  what it dropped (`kept_output.evicted`); a dropped handle leaves ``<handle>.gone``.

``outputs/<session>/`` (where a running command's streams are written) belongs to one live
process: it holds an flock on ``outputs/<session>/.owner-<token>``. A CLI killed with
SIGKILL never removes its directory (16 -> 77 of them after 100 kills, one of 48 MB); the
next exec tool of the state directory removes every session directory whose owners are all
gone (their locks free), and one without any owner file once it is an hour old.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sprawl_orch.config import BUDGET_BYTES, KEEP_BYTES, Config
from sprawl_orch.core.budget import drop_entry, evict_oldest
from sprawl_orch.core.private import private_dirs
from sprawl_orch.core.removal import delete_quietly

__all__ = ["BUDGET_BYTES", "KEEP_BYTES"]

OUTPUT_CAP = 64 * 1024  # bytes of each stream carried in the result itself
OWNER = ".owner-"
UNOWNED_GRACE = 3600.0


@dataclass(frozen=True)
class Stream:
    text: str  # the first OUTPUT_CAP bytes, with the note of the cut
    full: str | None  # the kept file, when one is kept
    size: int
    kept: int  # bytes of the kept file (0: none kept)


@dataclass(frozen=True)
class OutputKeeping:
    root: Path  # <state>/kept-output
    keep_bytes: int = KEEP_BYTES
    budget_bytes: int = BUDGET_BYTES

    def stream(self, path: Path, keep_dir: Path | None) -> Stream:
        """Read one stream; when longer than OUTPUT_CAP move it to `keep_dir` (None: not
        kept, e.g. the CLI's human mode already showed it), cut at keep_bytes."""
        try:
            on_disk = path.stat().st_size
            with open(path, "rb") as handle:
                head = handle.read(OUTPUT_CAP)
        except FileNotFoundError:
            # the arm wrote no output file: the stream was empty
            return Stream("", None, 0, 0)
        # output_pipe.py wrote only the first bytes of a longer stream and counted the rest
        size = on_disk
        # no readable .total (the stream fit): the file's own size is the total
        with contextlib.suppress(OSError, ValueError):
            size = max(on_disk, int(path.with_name(f"{path.name}.total").read_text()))
        text = head.decode("utf-8", errors="replace")
        if size <= OUTPUT_CAP:
            return Stream(text, None, size, 0)
        if keep_dir is None or self.keep_bytes <= 0:
            why = "not kept" if keep_dir is None else "not kept ([state] output_keep_bytes = 0)"
            return Stream(f"{text}\n[cut at {OUTPUT_CAP} of {size} bytes; {why}]", None, size, 0)
        private_dirs(keep_dir)
        full = keep_dir / path.name
        shutil.move(path, full)
        kept = on_disk
        if on_disk > self.keep_bytes:
            os.truncate(full, self.keep_bytes)  # frees the rest's blocks at once
            kept = self.keep_bytes
        if kept < size:
            note = (
                f"[cut at {OUTPUT_CAP} of {size} bytes; the first {kept} bytes are kept in "
                f"{full}, the other {size - kept} were not kept: [state] output_keep_bytes "
                f"= {self.keep_bytes} per stream]"
            )
        else:
            note = f"[cut at {OUTPUT_CAP} of {size} bytes; the full text is in {full}]"
        return Stream(f"{text}\n{note}", str(full), size, kept)

    def keep(
        self, handle: str, stdout: Path, stderr: Path, keep: bool
    ) -> tuple[Stream, Stream, dict[str, Any] | None]:
        """Both streams of a finished command, then the budget; the result's `kept_output`
        (None when nothing was cut)."""
        keep_dir = self.root / handle if keep else None
        out, err = self.stream(stdout, keep_dir), self.stream(stderr, keep_dir)
        if out.size <= OUTPUT_CAP and err.size <= OUTPUT_CAP:
            return out, err, None
        record: dict[str, Any] = {
            "keep_bytes": self.keep_bytes,
            "budget_bytes": self.budget_bytes,
            "stdout": {"bytes": out.size, "kept_bytes": out.kept},
            "stderr": {"bytes": err.size, "kept_bytes": err.kept},
            "evicted": [],
        }
        if out.kept or err.kept:
            evicted, over = self.within_budget(handle)
            record["evicted"] = evicted
            if over:
                record["not_kept"] = over
                out, err = _unkept(out, over), _unkept(err, over)
                record["stdout"]["kept_bytes"] = record["stderr"]["kept_bytes"] = 0
        return out, err, record

    def within_budget(self, handle: str) -> tuple[list[str], str | None]:
        """Drop the oldest kept outputs until the directory fits the budget (never the
        one just kept); (what was dropped, why `handle`'s own was not kept, if so)."""
        private_dirs(self.root)
        evicted: list[str] = []
        with os.fdopen(
            os.open(
                self.root / ".lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
            ),
            "a",
        ) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            usage = _usage(self.root)
            own = sum(size for _, name, size in usage if name == handle)
            if own > self.budget_bytes:
                _drop(self.root, handle, "larger than the whole budget")
                return [], (
                    f"{own} bytes of output alone exceed [state] output_budget_bytes = "
                    f"{self.budget_bytes}"
                )
            why = f"dropped (oldest first) to keep {handle}'s output"

            def gone(u: tuple[float, str, int]) -> bool:
                _drop(self.root, u[1], why)
                return True

            dropped = evict_oldest(
                usage,
                self.budget_bytes,
                size=lambda u: u[2],
                age=lambda u: u[0],
                spare=lambda u: u[1] == handle,
                drop=gone,
            )
            evicted = [name for _, name, _ in dropped]
        return evicted, None


def _unkept(stream: Stream, why: str) -> Stream:
    if stream.full is None:
        return stream
    head = stream.text[: stream.text.rfind("\n[cut at")]
    return Stream(
        f"{head}\n[cut at {OUTPUT_CAP} of {stream.size} bytes; not kept: {why}]",
        None,
        stream.size,
        0,
    )


def _usage(root: Path) -> list[tuple[float, str, int]]:
    """(kept at, handle, bytes on disk) of every kept output, oldest first."""
    found = []
    for entry in os.scandir(root):
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        size = 0
        # removed while counted (another claimant): it holds nothing toward the budget
        with contextlib.suppress(OSError):
            for name in os.listdir(entry.path):
                st = os.lstat(os.path.join(entry.path, name))
                size += min(st.st_size, st.st_blocks * 512) if st.st_blocks else st.st_size
            found.append((entry.stat(follow_symlinks=False).st_mtime, entry.name, size))
    return sorted(found)


def _drop(root: Path, handle: str, why: str) -> None:
    drop_entry(root, handle, f"{why} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")


def keeping(config: Config, state: Path) -> OutputKeeping:
    """The state directory's kept-output/ with the config's bounds."""
    return OutputKeeping(
        state / "kept-output", config.state.output_keep_bytes, config.state.output_budget_bytes
    )


# -- outputs/<session>/ of dead owners -------------------------------------------------------
def claim(session_dir: Path) -> int:
    """Mark `session_dir` as this live process's: an flocked owner file, made under a
    temporary name and renamed in, so a sweeper never sees it unlocked. The fd is the
    claim (closed on exec by default, released when this process dies)."""
    private_dirs(session_dir)
    token = secrets.token_hex(4)
    tmp = session_dir / f".claim-{token}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(tmp, session_dir / f"{OWNER}{token}")
    return fd


def sweep(outputs: Path, keep: Path | None = None) -> list[str]:
    """Remove every session directory under `outputs` whose owners are all gone; the
    names removed."""
    removed: list[str] = []
    try:
        sessions = list(os.scandir(outputs))
    except OSError:
        # no outputs directory yet: nothing abandoned to sweep
        return removed
    for entry in sessions:
        path = Path(entry.path)
        if keep is not None and path == keep:
            continue
        if not entry.is_dir(follow_symlinks=False):
            continue
        if _abandoned(path):
            delete_quietly(path)
            removed.append(entry.name)
    return removed


def _abandoned(path: Path) -> bool:
    owners = []
    # the session directory is gone: nothing to sweep
    with contextlib.suppress(OSError):
        owners = [n for n in os.listdir(path) if n.startswith(OWNER)]
    if not owners:
        # Made before owner files existed, or by a process between mkdir and its claim.
        with contextlib.suppress(OSError):
            return time.time() - path.stat().st_mtime > UNOWNED_GRACE
        return False
    for name in owners:
        try:
            fd = os.open(path / name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            # the owner file went away since listed: its owner closed
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live owner holds it
        finally:
            os.close(fd)
    return True
