"""Opening without ever following a link: the one open-beneath (apply, the change store, the
changes walk, workspaces, the copy's and the warm reset's tree removal).

A path beneath a directory fd: each component is opened with ``O_NOFOLLOW | O_DIRECTORY``
relative to the previous one, so a symbolic link anywhere on the way (planted by a command, or
the person's own) makes the open fail instead of leading out of the tree. ``..`` and absolute
paths are refused outright. One name: `open_dir` and `open_file` open it without following a
link there, a FIFO put in a file's place not blocking the open.
"""

from __future__ import annotations

import contextlib
import errno
import os

# getattr: Windows has none of these, and the copy's path side imports this module there (its
# dir-fd functions are then never called: core/removal.py's dir_fds_work).
_COMMON = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | _COMMON
# O_NONBLOCK: opening a FIFO that raced into place of a regular file must not hang.
FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | _COMMON


def open_dir(name: str, dir_fd: int | None = None) -> int:
    """Open a directory without following a link in its last component."""
    return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def open_file(path: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    """Open a file read-only without following a link in its last component; a FIFO does
    not block the open."""
    return os.open(path, FILE_FLAGS, dir_fd=dir_fd)


class NotBeneath(Exception):
    """The path leaves the tree, or a component on the way is a link or not a directory."""


def parts_of(rel: str) -> list[str]:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise NotBeneath(f"{rel!r} is not a plain relative path")
    return parts


def open_dir_beneath(root_fd: int, parts: list[str], make: int | None = None) -> int:
    """An fd of the directory ``parts`` under ``root_fd``; missing components are made with
    mode ``make`` when it is given. Raises NotBeneath on a link or non-directory."""
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts):
            try:
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if make is None:
                    raise
                # made by a racing opener since our open failed: open it as ours
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, make, dir_fd=fd)
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = "/".join(parts[: i + 1])
                    raise NotBeneath(f"{where} is a symbolic link or not a directory") from err
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file_beneath(root_fd: int, parts: list[str]) -> int:
    """A read-only fd of the file ``parts`` names under ``root_fd``: no link followed on the
    way (NotBeneath) or at the end (ELOOP), and a FIFO put there does not block the open."""
    parent = open_dir_beneath(root_fd, parts[:-1])
    try:
        return open_file(parts[-1], dir_fd=parent)
    finally:
        os.close(parent)
