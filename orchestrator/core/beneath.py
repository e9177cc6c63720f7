"""Opening without ever following a link: the one open-beneath (apply, the change store, the
changes walk, workspaces, the copy's and the warm reset's tree removal).

A path beneath a directory fd: each component is opened with ``O_NOFOLLOW | O_DIRECTORY``
relative to the previous one, so a symbolic link anywhere on the way (planted by a command, or
the person's own) makes the open fail instead of leading out of the tree. ``..`` and absolute
paths are refused outright. One name: `open_dir` and `open_file` open it without following a
link there, a FIFO put in a file's place not blocking the open. A whole tree: `walk_down`, the
one walk by directory fds.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from dataclasses import dataclass

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


def chmod_dir(path: str | os.PathLike[str], bits: int) -> None:
    """Set directory ``path``'s mode bits, opened without following a link at its last
    component: a link a command put in the directory's place is not chmod'ed through."""
    fd = os.open(path, DIR_FLAGS)
    try:
        os.fchmod(fd, bits)
    finally:
        os.close(fd)


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


class Moved(OSError):
    """A directory being walked was moved: the climb back through ``..`` reached another one."""


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def walk_down(
    fd: int,
    enter: Callable[[int, str], list[str]],
    *,
    left: Callable[[int, str], None] | None = None,
    vanished_ok: bool = False,
) -> None:
    """Walk the tree of the directory open at ``fd`` (closed here), depth first, by directory
    fds: the one dir-fd walker (the tree removal, core/removal.py; the warm reset's listing,
    container/warm_host.py).

    ``enter(dir_fd, rel)`` sees each directory (``rel`` below the top, "" for the top) and
    returns the names of the subdirectories to enter, each opened without following a link
    (open_dir). ``left(parent_fd, name)`` runs once a subdirectory is done, from its parent.
    A subdirectory that can't be opened any more (gone, or replaced by a link or a file since
    it was listed) raises, or with ``vanished_ok`` is passed over.

    Iterative, one fd held at a time: a command that nests thousands of directories exhausts
    neither fds nor Python's recursion limit (os.walk and shutil.rmtree recurse in 3.11: a
    1500-deep /tmp raised RecursionError out of the warm reset, issue 30). The climb back goes
    through ``..`` and is checked against the directory it came from, so a tree moved under
    the walk raises Moved rather than being misread.
    """
    try:
        stack = [_Frame("", enter(fd, ""), _ident(fd))]
        while stack:
            top = stack[-1]
            if top.pending:
                sub = top.pending.pop()
                try:
                    inner = open_dir(sub, fd)
                except OSError:
                    if vanished_ok:
                        continue
                    raise
                os.close(fd)
                fd = inner
                rel = f"{top.rel}/{sub}" if top.rel else sub
                stack.append(_Frame(rel, enter(fd, rel), _ident(fd)))
                continue
            stack.pop()
            if not stack:
                break
            old, fd = fd, os.open("..", DIR_FLAGS, dir_fd=fd)
            os.close(old)
            if _ident(fd) != stack[-1].ident:
                raise Moved(f"{stack[-1].rel or '.'} was moved while it was walked")
            if left is not None:
                left(fd, top.rel.rsplit("/", 1)[-1])
    finally:
        os.close(fd)


@dataclass
class _Frame:
    rel: str  # the directory's path below the top
    pending: list[str]  # its subdirectories still to enter
    ident: tuple[int, int]  # (st_dev, st_ino), to check the climb back through ".."
