"""A workspace's names and places on disk, what a refresh reports, and the list of them all
(issue 23; workspace.py says what a workspace is). Layout under
``<state>/workspaces/<key of the working directory>/<name>/``::

    tree/          the agent's copy: commands run here
    base/          the person's tree as of the last flow-in (a synced copy, stamps beside it)
    base.stamps    base's stamp record: the person's stamps apply checks against
    bases/         the base version of every path the agent changed (three-way, kept until
                   applied or discarded; absent there = the path did not exist; in a
                   directory the person deleted, only the conflicts' are kept)
    theirs/        the person's version of every conflicting path
    undo/          during a flow-in: the base's version of each path the agent changed that
                   the base sync overwrites, to put back if the sync fails (workspace_flow.py)
    meta.json      working directory, name, conflicts
    clean.stamps   workspace_walk.py: equal file pairs of tree and base, by stamp
    flowing        present while a flow-in (the base sync) runs; one left behind says the
                   base's record may be stale (then base is walked)
    lock           flock(2)ed while the workspace's state changes
    running/       one flock(2)ed file per command running in it
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.changes.changes import ChangeEntry
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.removal import delete_path

CLEAN = "clean.stamps"  # workspace_walk.py: equal file pairs of tree and base, by stamp
FLOWING = "flowing"  # present while a flow-in runs: one cut short left base unrecorded
# replace_path's new entries before they are renamed into place: beside the trees, never in
# one, so a run killed mid-copy leaves nothing a command or `changes` could see.
STAGING = "staging"
UNDO = "undo"  # a flow-in's way back (workspace_flow.py): deleted before and after each
TREE, BASE, STAMPS, BASES, THEIRS, META, LOCK, RUNNING = (
    "tree",
    "base",
    "base.stamps",
    "bases",
    "theirs",
    "meta.json",
    "lock",
    "running",
)
MAX_NAME = 64
NAME_MAX = 255  # bytes of one path component on Linux filesystems
_UNSEEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def check_name(name: str) -> str:
    """``name`` if it can name a workspace, else E_CONFIG_INVALID saying what is wrong."""
    why = None
    if not name:
        why = "is empty"
    elif len(name) > MAX_NAME:
        why = f"is {len(name)} characters long (at most {MAX_NAME})"
    elif "/" in name or "\\" in name:
        why = "holds a path separator"
    elif name in (".", "..") or ".." in name:
        why = "holds '..'"
    elif any(unicodedata.category(c) in _UNSEEN for c in name):
        # C1 controls, bidi overrides, zero-width and line separators display as something
        # else (or as nothing); a lone surrogate can't be encoded as a file name at all.
        why = "holds a control, format or separator character"
    elif len(name.encode("utf-8")) > NAME_MAX:
        # 64 four-byte characters are 256 bytes: mkdir would fail with ENAMETOOLONG
        why = f"is {len(name.encode('utf-8'))} bytes long in UTF-8 (at most {NAME_MAX})"
    elif name.startswith("."):
        why = "starts with '.'"
    if why is not None:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            repr(name),
            f"not a workspace name: it {why}",
            "name a workspace with letters, digits, '-', '_' or '.', e.g. --workspace fix-1",
        )
    return name


def workdir_key(workdir: Path) -> str:
    real = os.path.realpath(workdir)
    return hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def workspaces_root(state: Path) -> Path:
    return state / "workspaces"


@dataclass(frozen=True)
class Place:
    """Whose workspace and where, and the refusals that name it."""

    state: Path
    workdir: Path
    name: str
    dir: Path

    def refused_workdir(self) -> SprawlError:
        return SprawlError(
            ErrorCode.STORAGE_FATAL,
            str(self.workdir),
            f"the working directory of workspace {self.name!r} is missing or not a directory "
            f"(moved or deleted); the workspace is kept at {self.dir}",
            f"restore the directory, or drop the workspace: sprawl-orch workspace discard "
            f"{self.name}",
        )

    def lost(self) -> SprawlError:
        """A workspace this caller ran commands in, whose state directory is gone now."""
        return SprawlError(
            ErrorCode.STORAGE_FATAL,
            self.name,
            f"workspace {self.name!r} is gone: its state directory {self.dir} was "
            "deleted or damaged since the last command; the agent's changes in it are lost",
            "run the command again to start the workspace afresh from the person's tree",
        )

    def gone(self) -> SprawlError:
        return SprawlError(
            ErrorCode.UNKNOWN_HANDLE,
            self.name,
            f"no workspace {self.name!r} for {self.workdir} (none was made, or its state "
            f"directory {self.dir} was deleted)",
            "list them with: sprawl-orch workspace list",
        )


@dataclass
class Refresh:
    """What happened before a command: whether the workspace was made now, what flowed in
    from the person's tree, which conflicts are named, and whether the flow was held back."""

    created: bool = False
    flowed_in: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    new_conflicts: list[str] = field(default_factory=list)
    held_back: bool = False
    note: str | None = None


@dataclass
class WorkspaceView:
    """`workspace show`: the agent's changes against the person's tree, and the conflicts."""

    name: str
    workdir: str
    path: str
    changes: list[ChangeEntry]
    conflicts: dict[str, str]  # path -> where the person's version is kept
    running: int


def locked_by_other(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        # no lock file: no command of this workspace holds it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # held by a live command: that is the answer
        return True
    finally:
        os.close(fd)
    return False


def isdir(st: os.stat_result) -> bool:
    return (st.st_mode & 0o170000) == 0o040000


def scan_one(root: Path, rel: str) -> os.stat_result | None:
    try:
        return os.lstat(root / rel)
    except (FileNotFoundError, NotADirectoryError):
        # absent on this side: None is the answer
        return None


def listing(state: Path) -> list[dict[str, object]]:
    """Every workspace under ``state``: name, working directory, conflicts, bytes."""
    out: list[dict[str, object]] = []
    root = workspaces_root(state)
    # no workspaces directory: none to list
    with contextlib.suppress(FileNotFoundError):
        for group in sorted(root.iterdir()):
            for ws in sorted(group.iterdir()) if group.is_dir() else ():
                try:
                    meta = json.loads((ws / META).read_text())
                except (OSError, ValueError):
                    # a half-made workspace without meta is not listed
                    continue
                out.append(
                    {
                        "name": meta.get("name", ws.name),
                        "workdir": meta.get("workdir", "?"),
                        "conflicts": meta.get("conflicts", []),
                        "modified": time.strftime(
                            "%Y-%m-%d %H:%M:%S", time.localtime((ws / META).stat().st_mtime)
                        ),
                    }
                )
    return out


def replay_failed(ws: Path, name: str, tree: Path, err: OSError) -> SprawlError:
    """Finishing a flow-in cut short failed (a full disk, say): its journal stays."""
    return SprawlError(
        ErrorCode.STORAGE_FATAL,
        str(ws),
        f"finishing the flow-in cut short in workspace {name!r} failed ({err}); the agent's "
        f"changes in {tree} and the person's tree are untouched",
        "make room in (or access to) the state directory, then run the command again: it "
        "finishes the flow-in",
    )


def remove_parts(ws: Path) -> None:
    """Every part of workspace ``ws`` on disk but its lock (discard, under that lock): the
    trees through the one tree removal, the stamp records as copy/stamps.py keeps them. Gone
    already is no error (discard is idempotent)."""
    for sub in (TREE, BASE, BASES, THEIRS, RUNNING, UNDO):
        delete_path(ws / sub)
    copy_stamps.forget(ws / STAMPS)
    copy_stamps.forget(ws / CLEAN)
    for name in (META, META + ".tmp", FLOWING, "clean.json", "clean.json.tmp"):
        # already gone: discard is idempotent
        with contextlib.suppress(FileNotFoundError):
            (ws / name).unlink()
