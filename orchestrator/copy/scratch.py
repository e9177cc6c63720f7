"""A scratch copy's lifetime: made under the scratch root, synced before each command,
deleted when its tool is done (design §5). The sync itself is `copy_sync.sync`."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from sprawl_orch.copy.sync import Bounds, FileWork, sync
from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors
from sprawl_orch.core.removal import delete_path

_TAG = re.compile(r"[^/\0]{1,128}")


class ScratchCopy:
    """A private copy for one tool instance, kept between commands and synced before each."""

    path: Path

    def __init__(
        self, scratch_root: Path, tag: str, announce: Callable[[Path], None] | None = None
    ) -> None:
        """`announce` hears the path *before* the directory exists, so a guardian knows of
        every copy even when the orchestrator dies right after making it."""
        if not _TAG.fullmatch(tag):
            raise SprawlError(
                ErrorCode.CONFIG_INVALID,
                repr(tag),
                "a scratch copy tag must be 1-128 characters without '/' or NUL",
                "pass a plain identifier (a session name) as the tag",
            )
        with os_errors(
            ErrorCode.STORAGE_FATAL,
            scratch_root,
            "cannot make a scratch copy there",
            "check that the scratch directory exists and is writable",
        ):
            # Like mkdtemp (mode 0700, a random unguessable name, O_EXCL-style mkdir), but
            # the name is chosen and announced first.
            while True:
                path = Path(scratch_root) / f"sprawl-{tag}-{secrets.token_hex(6)}"
                if announce is not None:
                    announce(path)
                try:
                    os.mkdir(path, 0o700)
                except FileExistsError:
                    continue
                self.path = path
                break

    def sync(self, source: Path, bounds: Bounds = Bounds()) -> FileWork:
        """Sync the copy to ``source``; on refusal the whole copy directory is deleted."""
        return sync(source, self.path, bounds)

    def close(self) -> str | None:
        """Delete the copy. Never raises: returns None, or a text saying what was left behind."""
        try:
            delete_path(self.path)
        except Exception as err:  # design §5: a copy that cannot be deleted never fails the command
            return f"could not delete the scratch copy {self.path}: {err}"
        return None
