"""The ledger: one JSON line per result, appended by any number of processes.

Where it lives is `orchestrator.state.ledger_path`: `[state] ledger` if set, else
`<state dir>/ledger.jsonl`.

Concurrent writers: every line is written with one `os.write` on an `O_APPEND`
descriptor, inside an exclusive `flock`. O_APPEND alone makes each write land at
the end, but POSIX promises no interleaving only for pipes up to PIPE_BUF (4096 on
Linux), and a result with 64 KiB of output is far past that; on a regular file a
long write can be split (signals, NFS), so the lock is what keeps lines whole.
Windows has no flock: there O_APPEND alone orders the writes.

Readers take no lock: writes only ever append, and a line is complete once its
newline is there, so an unterminated tail (a write in progress or a writer that
died mid-line) is skipped and counted, like any line that isn't a JSON object.

Values of environment variables never enter the ledger (design §8): a result whose
`env` is not a list of names, or that carries `env_values` anywhere, is refused.

Bounded (issue 30, host disk): each line holds up to 64 KiB of each stream and the whole argv
(233 KB a command measured), and the ledger was never pruned. Past half of `[state]
ledger_budget_bytes` the file is renamed to `<ledger>.1` (replacing the older one) under the
lock, and the line goes to a new file: the two together stay within the budget. A writer that
was waiting on the lock of a file that got renamed meanwhile sees that its descriptor no longer
names the ledger's path, and opens it again. Readers read `<ledger>.1` first, then the ledger.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePath
from typing import Any

from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors
from sprawl_orch.core.private import private_dirs


def _env_leak(result: Mapping[str, Any]) -> str | None:
    """Why `result` would write an environment value, or None."""
    env = result.get("env")
    if env is not None:
        if not isinstance(env, list | tuple):
            return f"`env` is a {type(env).__name__}; it must list names only"
        for name in env:
            if not isinstance(name, str) or "=" in name:
                # Never quote the entry: it may be NAME=value.
                return "`env` holds an entry that is not a bare name"
    return _values_key(result, "result")


def _values_key(value: object, where: str) -> str | None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if key == "env_values":
                return f"{where} carries `env_values`"
            found = _values_key(inner, f"{where}.{key}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            found = _values_key(inner, f"{where}[{index}]")
            if found:
                return found
    return None


if sys.platform != "win32":
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

else:  # pragma: no cover - exercised on Windows only

    def _lock(fd: int) -> None:
        pass

    def _unlock(fd: int) -> None:
        pass


class Ledger:
    """Append results as JSON lines; read them back, skipping torn lines."""

    def __init__(self, path: Path, budget_bytes: int | None = None) -> None:
        self.path = path
        self.budget_bytes = budget_bytes  # None: unbounded (a reader, or a file named by hand)
        # Lines the last read() skipped: torn, not JSON, or not an object.
        self.skipped = 0

    def append(self, result: Mapping[str, Any]) -> None:
        leak = _env_leak(result)
        if leak:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                subject="ledger record",
                detail=f"{leak}; environment values never enter the ledger, nothing was written",
                recovery="record the names passed (sorted), never their values; this is a "
                "bug in the code that built the result",
            )
        try:
            line = json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=_jsonable)
            data = (line + "\n").encode("utf-8")
        except (TypeError, ValueError) as err:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                subject="ledger record",
                detail=f"the result is not JSON-serialisable: {err}",
                recovery="results hold only str, int, float, bool, None, lists and dicts",
            ) from err
        with os_errors(
            ErrorCode.STORAGE_FATAL,
            self.path,
            f"cannot append {len(data)} bytes to the ledger",
            "free space on the ledger's file system, or point [state] ledger elsewhere",
        ):
            private_dirs(self.path.parent)
            while True:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    _lock(fd)
                    try:
                        if not self._names_path(fd):
                            continue  # rotated while we waited: the lock was on the old file
                        if self._rotate(fd, len(data)):
                            continue  # this file is now <ledger>.1: the line goes to a new one
                        written = os.write(fd, data)
                        # A regular-file write is whole unless the disk fills or a signal
                        # lands mid-copy; the lock is still held, so finishing it keeps the
                        # line whole.
                        while written < len(data):
                            written += os.write(fd, data[written:])
                        return
                    finally:
                        _unlock(fd)
                finally:
                    os.close(fd)

    def _names_path(self, fd: int) -> bool:
        try:
            here = os.stat(self.path)
        except FileNotFoundError:
            # between a rotation's rename and the new file: the caller opens it again
            return False
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)

    def _rotate(self, fd: int, adding: int) -> bool:
        """Under the lock: rename a full ledger to `<ledger>.1`; True when it was."""
        if self.budget_bytes is None:
            return False
        size = os.fstat(fd).st_size
        if size == 0 or size + adding <= self.budget_bytes // 2:
            return False
        os.replace(self.path, self.rotated)
        return True

    @property
    def rotated(self) -> Path:
        return self.path.with_name(self.path.name + ".1")

    def read(self) -> Iterator[dict[str, Any]]:
        """Yield every whole record, the rotated file's first; `skipped` counts the lines
        that weren't."""
        self.skipped = 0
        for path in (self.rotated, self.path):
            yield from self._read(path)

    def _read(self, path: Path) -> Iterator[dict[str, Any]]:
        with os_errors(
            ErrorCode.STORAGE_FATAL,
            path,
            "cannot read the ledger",
            "check the file's permissions, or pass another file with --ledger",
        ):
            try:
                handle = path.open("rb")
            except FileNotFoundError:
                # no ledger yet: nothing to read
                return
        with handle:
            for raw in handle:
                if not raw.endswith(b"\n"):
                    self.skipped += 1
                    continue
                record = _parse(raw)
                if record is None:
                    if raw.strip():
                        self.skipped += 1
                    continue
                yield record


def _jsonable(value: object) -> object:
    # Paths appear in results as "the way back" to full output on disk.
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None
