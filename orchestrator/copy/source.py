"""The source side of a sync: what the walk judges is what it copies (design §5).

Why: the walk used to judge an entry by one resolution of its path (``stat``, then the guard's
``realpath``) and copy it through another (``open`` by path). A host process flipping a tree
link `k` between /usr/share/common-licenses/Apache-2.0 and a secret under ~/.config while syncs
ran got the secret into the copy in 1 920 of 50 546 API syncs and 5 of 162 `exec -- cat k`
commands (stop 33's last attacker; tests/escapes/test_link_races.py). The same flip of an
ordinary file or directory of the tree into a link, and of a directory link, leaked too.

So every source object is held open from the moment it is judged:

- source directories are held by fd (``SyncDir.src_fd``) and listed through it; their entries
  are looked at and opened relative to that fd, never by a path that a rename can redirect;
- an entry the walk takes as it is (in the tree, not a link) is opened ``O_NOFOLLOW`` and
  the opened file's ``(st_dev, st_ino)`` must be the judged ``lstat``'s;
- an entry reached by following a link is opened ``O_PATH`` first (Linux: following the link
  once, opening nothing, so a link flipped to a device starts nothing); its ``fstat`` and the
  kernel's own path of it (``/proc/self/fd/N``) are what the guard judges, and the bytes are
  read through ``/proc/self/fd/N`` -- by construction the very inode judged -- and checked by
  ``(st_dev, st_ino)`` once more.

A mismatch raises :class:`SourceChanged`: the walk leaves the entry out and names it in the
result's ``refused_links``. Where there are no directory fds or no ``O_PATH`` with /proc
(Windows, macOS), the same identities are compared by path: ``stat``, ``realpath``, ``stat``
of the real path, ``open``, ``fstat`` -- the judged real path and the copied file must be one
inode; what that cannot see is a directory on the real path itself flipped between two of
those calls, which needs write access to that directory.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from sprawl_orch.copy.fileops import READ_FLAGS, SourceUnreadable

_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
_O_PATH: int = getattr(os, "O_PATH", 0)
DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC
# Opening an entry without following it failed because it is no longer what was judged:
# ELOOP, O_NOFOLLOW met a link (Linux, macOS; FreeBSD says EMLINK); ENOENT/ENOTDIR, gone.
_SWAPPED = (errno.ELOOP, errno.EMLINK, errno.ENOENT, errno.ENOTDIR)
# Entries by fd: scandir of an fd and the dir_fd calls below (Linux, macOS; not Windows).
BY_FD = (
    bool(_O_DIRECTORY and _O_NOFOLLOW)
    and os.scandir in os.supports_fd
    and os.open in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
    and os.readlink in os.supports_dir_fd
)
# The kernel's path of an open fd, and reopening exactly that inode: /proc's magic links.
BY_PROC = BY_FD and bool(_O_PATH) and os.path.isdir("/proc/self/fd")


class SourceChanged(Exception):
    """A source entry was not the same file when opened as when judged (a link flipped, a
    file or directory swapped while syncing). Not an OSError: the walk leaves the entry out
    and names it; the sync goes on."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path
        self.why = f"{what} between being judged and being opened (changed while syncing): left out"


def same_inode(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_dev == b.st_dev and a.st_ino == b.st_ino


def open_top(path: str) -> tuple[int, os.stat_result]:
    """The root of the source (already resolved by the caller), held open: (fd or -1, stat)."""
    if not BY_FD:
        return -1, os.stat(path)
    fd = os.open(path, DIR_FLAGS)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def listing(fd: int, path: str) -> list[os.DirEntry[str]]:
    """The entries of a held source directory (by path where there are no dir fds). Entries
    listed through an fd carry only their name in ``.path``: the walk builds paths itself."""
    try:
        with os.scandir(fd if fd >= 0 else path) as it:
            return list(it)
    except OSError as err:
        raise SourceUnreadable(path, err) from err


def close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def lstat(parent: int, name: str, path: str) -> os.stat_result:
    """The entry itself, not followed (relative to the held parent where there is one)."""
    if parent >= 0:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    return os.lstat(path)


def readlink(parent: int, name: str, path: str) -> str:
    return os.readlink(name, dir_fd=parent) if parent >= 0 else os.readlink(path)


@dataclass
class Reached:
    """What following entry ``path`` reached: its stat, the real path the guard judges, and
    (Linux) an ``O_PATH`` fd holding exactly it."""

    path: str
    st: os.stat_result
    real: str
    fd: int = -1

    def close(self) -> None:
        close(self.fd)
        self.fd = -1

    def reopen(self, flags: int) -> tuple[int, os.stat_result]:
        """An fd of the reached inode opened with ``flags`` and its fstat; SourceChanged if
        it is another."""
        try:
            if self.fd >= 0:
                fd = os.open(f"/proc/self/fd/{self.fd}", flags | _O_CLOEXEC)
            else:
                fd = os.open(self.path, flags | _O_CLOEXEC)
        except OSError as err:
            raise SourceUnreadable(self.path, err) from err
        return checked(fd, self.st, self.path, "it was another file")


def follow(parent: int, name: str, path: str) -> Reached:
    """Follow entry ``name`` of the held directory ``parent`` (OSError as ``stat`` raises it
    for a link that leads nowhere)."""
    if BY_PROC:
        fd = os.open(name, _O_PATH | _O_CLOEXEC, dir_fd=parent)
        try:
            st = os.fstat(fd)
            real = os.readlink(f"/proc/self/fd/{fd}")
        except BaseException:
            os.close(fd)
            raise
        return Reached(path, st, real, fd)
    st = os.stat(name, dir_fd=parent) if parent >= 0 else os.stat(path)
    real = os.path.realpath(path)
    try:
        again = os.stat(real)
    except OSError:
        raise SourceChanged(path, "its real path was gone") from None
    if not same_inode(st, again):
        raise SourceChanged(path, "its real path led to another file")
    return Reached(path, st, real)


def checked(fd: int, judged: os.stat_result, path: str, what: str) -> tuple[int, os.stat_result]:
    """``fd`` and its fstat if its file is the ``judged`` one (device and inode), else
    closed and SourceChanged saying ``what``."""
    try:
        now = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not same_inode(now, judged) or stat.S_IFMT(now.st_mode) != stat.S_IFMT(judged.st_mode):
        os.close(fd)
        raise SourceChanged(path, what)
    return fd, now


def open_in(
    parent: int, name: str, path: str, judged: os.stat_result, flags: int
) -> tuple[int, os.stat_result]:
    """Open entry ``name`` of the held ``parent`` without following it and check it is the
    ``judged`` (lstat'd) file: an ordinary entry swapped for a link fails here (ELOOP)
    instead of being followed."""
    try:
        if parent >= 0:
            fd = os.open(name, flags | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=parent)
        else:
            fd = os.open(path, flags | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as err:
        if err.errno in _SWAPPED:
            raise SourceChanged(path, "it was no longer the same entry") from None
        raise SourceUnreadable(path, err) from err
    return checked(fd, judged, path, "it was replaced")


@dataclass
class SourceFile:
    """A judged source file: ``open()`` gives a read fd of exactly it (or SourceChanged)."""

    path: str  # for messages
    st: os.stat_result
    parent: int = -1
    name: str = ""
    reached: Reached | None = None

    def open(self) -> tuple[int, os.stat_result]:
        if self.reached is not None:
            return self.reached.reopen(READ_FLAGS)
        return open_in(self.parent, self.name, self.path, self.st, READ_FLAGS)
