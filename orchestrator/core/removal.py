"""The one tree removal: delete a file or a whole tree without ever following a link in it.

What gets removed is hostile ground: a copy a command wrote into, a container's /tmp seen from
the host, a kept-output or changes directory. A link is removed, never followed; a tree nested
thousands of levels deep exhausts neither fds nor Python's recursion limit (shutil.rmtree in
3.11 keeps one fd and one stack frame per level: a 1500-deep /tmp raised RecursionError out of
the warm reset, issue 30).

Two walks, one behaviour: through directory fds wherever the platform has every dir-fd call
(Linux, macOS; `dir_fds_work`), else by lstat-checked paths (Windows, where a read-only file is
made writable to be deleted, and a directory nested too deep for MAX_PATH is renamed up first).
The copy (copy/fileops.py, copy/paths.py), the warm reset, the guardian, the kept stores and the
image builder all remove through here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Literal

from sprawl_orch.core.beneath import open_dir, walk_down

Kind = Literal["dir", "file", "other"]
"""An entry seen without following it: a directory, a regular file, or anything else (a link,
fifo, socket or device: never entered, never opened, only deleted)."""

# getattr: Windows has none of these, and this module must import there (the path walk).
_PARENT_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_REPARSE_POINT = 0x400  # FILE_ATTRIBUTE_REPARSE_POINT (winnt.h); st_file_attributes is Windows'
# Relative path length at which the path walk hoists a directory: well under Windows' MAX_PATH
# (260) once a temporary directory's path is in front, and far under Linux's PATH_MAX (4096).
_HOIST_AT = 128


def dir_fds_work() -> bool:
    """Whether the fd walks can run here: every dir_fd call they make, O_DIRECTORY and
    O_NOFOLLOW (the copy's FdCopy needs the same)."""
    dir_fd_calls = (os.open, os.stat, os.mkdir, os.unlink, os.rmdir, os.readlink, os.symlink)
    return (
        hasattr(os, "O_DIRECTORY")
        and hasattr(os, "O_NOFOLLOW")
        and hasattr(os, "fchmod")
        and os.scandir in os.supports_fd
        and all(f in os.supports_dir_fd for f in dir_fd_calls)
        and os.stat in os.supports_follow_symlinks
    )


DIR_FDS = dir_fds_work()


# -- through directory fds ------------------------------------------------------------------


def _empty_out(fd: int) -> tuple[list[str], int]:
    """Unlink every non-directory entry of ``fd``; return its subdirectory names and the count."""
    subdirs: list[str] = []
    removed = 0
    with os.scandir(fd) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
                removed += 1
    return subdirs, removed


def remove_tree(name: str, parent_fd: int) -> int:
    """Delete directory ``name`` of ``parent_fd`` and everything in it; return the files removed.

    "Files" are all non-directory entries (regular files, links, fifos, ...). Links are removed,
    never followed. The walk is core/beneath.py's walk_down: one directory fd at a time, the
    climb back through ``..`` checked (a tree moved under it raises), so a deep tree costs
    neither fds nor stack.
    """
    removed = 0

    def enter(fd: int, _rel: str) -> list[str]:
        nonlocal removed
        subdirs, count = _empty_out(fd)
        removed += count
        return subdirs

    def left(fd: int, sub: str) -> None:
        os.rmdir(sub, dir_fd=fd)

    walk_down(open_dir(name, parent_fd), enter, left=left)
    os.rmdir(name, dir_fd=parent_fd)
    return removed


def remove_entry(name: str, parent_fd: int, is_dir: bool) -> int:
    """Delete one entry of ``parent_fd`` (a whole tree if ``is_dir``); return the files removed."""
    if is_dir:
        return remove_tree(name, parent_fd)
    os.unlink(name, dir_fd=parent_fd)
    return 1


# -- by lstat-checked paths (no dir fds: Windows) -------------------------------------------


def kind_of(st: os.stat_result) -> Kind:
    if getattr(st, "st_file_attributes", 0) & _REPARSE_POINT:
        return "other"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def unlink_path(path: str, kind: Kind) -> None:
    try:
        os.unlink(path)
    except PermissionError:
        if os.name != "nt" or kind != "file":
            raise
        # Windows refuses to delete a read-only file (a source file without u+w is copied as
        # one: os.chmod sets FILE_ATTRIBUTE_READONLY); shutil.rmtree's onexc does the same.
        os.chmod(path, stat.S_IWRITE)
        os.unlink(path)


def remove_tree_by_path(path: str) -> int:
    """Delete directory ``path`` and everything in it; return the non-directories removed.

    Iterative (a command can nest directories past Python's recursion limit); directories
    nested deeper than ``_HOIST_AT`` characters below ``path`` are renamed up to ``path``.
    """
    removed = 0
    stack: list[tuple[str, bool]] = [(path, False)]
    while stack:
        here, emptied = stack.pop()
        if emptied:
            os.rmdir(here)
            continue
        stack.append((here, True))
        with os.scandir(here) as it:
            names = [e.name for e in it]
        for name in names:
            entry = os.path.join(here, name)
            kind = kind_of(os.lstat(entry))
            if kind != "dir":
                unlink_path(entry, kind)
                removed += 1
                continue
            if len(entry) - len(path) > _HOIST_AT:
                hoisted = os.path.join(path, f".sprawl-hoist-{secrets.token_hex(8)}")
                os.rename(entry, hoisted)
                entry = hoisted
            stack.append((entry, False))
    return removed


# -- by path, either walk ---------------------------------------------------------------------


def delete_path(path: str | os.PathLike[str]) -> None:
    """Delete ``path`` (a file or a whole tree) without following a link in it: a link at
    ``path`` itself is removed, not followed. No error if it is already gone; other OSErrors
    are the caller's."""
    path = Path(path)
    if not DIR_FDS:
        try:
            kind = kind_of(os.lstat(path))
        except FileNotFoundError:
            return
        if kind == "dir":
            remove_tree_by_path(str(path))
        else:
            unlink_path(str(path), kind)
        return
    try:
        parent = os.open(path.parent, _PARENT_FLAGS)
    except FileNotFoundError:
        return
    try:
        try:
            st = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        remove_entry(path.name, parent, stat.S_ISDIR(st.st_mode))
    finally:
        os.close(parent)


def delete_quietly(path: str | os.PathLike[str]) -> None:
    """delete_path where a failure has nowhere to be said (clean-up of our own scratch:
    outputs after they were read, a failed store write, a probe's work dir), as
    shutil.rmtree(ignore_errors=True) was."""
    # What could not be removed stays; the owner's next sweep (kept-output budget, guardian,
    # a new session's sweep of dead sessions) tries again.
    with contextlib.suppress(OSError):
        delete_path(path)
