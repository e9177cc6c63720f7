"""Low-level file operations of the synced copy (design §5), all relative to directory fds.

The copy side is hostile ground: an earlier command may have planted symbolic links, hard
links, fifos or deep trees there, and with the `copied_tree` arm (no process-tree guarantee) a
leftover process may even still be changing it. So every copy-side operation here works on a
directory fd plus one name and passes ``O_NOFOLLOW``: a path through the copy is never resolved
by the kernel, and no planted link is ever followed. New files are created with
``O_CREAT | O_EXCL`` only, so each file we write is a new inode in a new directory entry; we
never open an existing copy file for writing, so nothing a command linked to it can be written
through. The source side (the person's tree) is only ever opened read-only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from typing import Protocol

from sprawl_orch.core.beneath import open_dir

# The one tree removal, and what it calls an entry (the copy's walk reads Kind from here).
from sprawl_orch.core.removal import Kind as Kind
from sprawl_orch.core.removal import remove_entry

CHUNK = 1024 * 1024
# The copy root's mode, made so and restored by every sync: its owner only, as the copy holds
# the person's files (a command may chmod it; the next sync undoes that).
ROOT_MODE = 0o700
"""Compare and copy in 1 MiB pieces: large enough to amortise the syscalls, small enough to
keep two buffers cheap."""

# getattr: Windows has none of O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC, O_NONBLOCK, and this module
# must still import there (copy_paths reuses its source-side helpers; the guardian imports it).
# The dir-fd functions below are only called where copy_sync's probe found dir_fd support.
O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
# O_BINARY: without it os.open on Windows opens in text mode (CRLF translated, ^Z ends reads).
_COMMON = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
# O_NONBLOCK: opening a fifo that raced into place of a regular file must not hang the sync.
READ_FLAGS = os.O_RDONLY | _COMMON | getattr(os, "O_NONBLOCK", 0)
# Setting times through the open fd (futimens) where the platform can; elsewhere (Windows)
# copy_paths sets them by path once the file is closed.
TIMES_BY_FD = os.utime in os.supports_fd
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | _COMMON


class BudgetExceeded(Exception):
    """A source file grew past the byte budget while it was being copied."""


class SourceUnreadable(Exception):
    """A source file could not be opened or read; ``path`` names it, ``__cause__`` says why."""

    def __init__(self, path: str, err: OSError) -> None:
        super().__init__(f"{path}: {err.strerror or err}")
        self.path = path
        self.reason = err.strerror or str(err)


class Source(Protocol):
    """A judged source file (copy/source.py's SourceFile): ``open`` gives a read fd of
    exactly the file judged, or raises (copy.source.SourceChanged, SourceUnreadable)."""

    path: str

    def open(self) -> tuple[int, os.stat_result]:
        """A read fd and its fstat (taken once: a copied file costs no second fstat)."""
        ...


def _read_source(fd: int, size: int, path: str) -> bytes:
    try:
        return os.read(fd, size)
    except OSError as err:
        raise SourceUnreadable(path, err) from err


def same_bytes(src: Source, name: str, dst_fd: int, size: int, mode: int) -> bool:
    """True when copy entry ``name`` is a regular file with ``mode`` holding the source bytes.

    ``size`` is the source size from its stat. Bytes are compared in full (no mtime shortcut,
    design §5: a same-length rewrite within one timestamp tick would otherwise be missed). Only
    ``size`` bytes are read: a source that grows after its stat is indistinguishable from one
    that changes right after the sync, which no sync can see either.
    """
    try:
        dfd = os.open(name, READ_FLAGS | os.O_NOFOLLOW, dir_fd=dst_fd)
    except OSError:
        return False  # a link, or gone: it differs and will be replaced
    try:
        dst = os.fstat(dfd)
        if (
            not stat.S_ISREG(dst.st_mode)
            or dst.st_size != size
            or stat.S_IMODE(dst.st_mode) != mode
        ):
            return False
        return same_content(src, dfd, size)
    finally:
        os.close(dfd)


def same_content(src: Source, dfd: int, size: int) -> bool:
    """True when the first ``size`` bytes of the source equal those of the open copy file."""
    sfd, _ = src.open()
    src_path = src.path
    try:
        left = size
        while left > 0:
            want = min(CHUNK, left)
            a = _read_source(sfd, want, src_path)
            try:
                b = os.read(dfd, want)
            except OSError:
                return False
            if not a or a != b:
                return False
            left -= len(a)
        return True
    finally:
        os.close(sfd)


def copy_file(
    src: Source, name: str, dst_fd: int, mode: int, budget: int
) -> tuple[int, os.stat_result]:
    """Copy the source file into a NEW entry ``name`` of ``dst_fd``; return the bytes copied
    and the new file's stat once it is written (its stamp for the record, copy_stamps).

    The entry must not exist (``O_EXCL`` refuses anything there, a planted link included).
    Copies until end of file or the size of the opened source's stat, whichever comes first
    (_pump), and at most ``budget`` bytes; past that, the partial file is removed and
    :class:`BudgetExceeded` is raised. Permission bits are set with ``fchmod`` so
    the process umask does not change them.
    """
    return copy_new(
        src,
        lambda: os.open(name, CREATE_FLAGS, 0o600, dir_fd=dst_fd),
        lambda dfd: os.fchmod(dfd, mode),
        lambda: os.unlink(name, dir_fd=dst_fd),
        budget,
    )


def copy_opened_into(
    sfd: int, sst: os.stat_result, src_path: str, name: str, dst_fd: int, mode: int, budget: int
) -> tuple[int, os.stat_result]:
    """copy_file once the source is open and checked (``sfd``, closed here): what a copy
    worker (copy/pool.py) runs."""
    return copy_opened(
        sfd,
        sst,
        src_path,
        lambda: os.open(name, CREATE_FLAGS, 0o600, dir_fd=dst_fd),
        lambda dfd: os.fchmod(dfd, mode),
        lambda: os.unlink(name, dir_fd=dst_fd),
        budget,
    )


def copy_new(
    src: Source,
    create: Callable[[], int],
    finish: Callable[[int], None],
    discard: Callable[[], None],
    budget: int,
) -> tuple[int, os.stat_result]:
    """Copy the source into the fd ``create`` opens; ``finish`` runs on it before it is closed,
    ``discard`` removes the new entry when copying fails. Returns the bytes copied and the
    new file's ``fstat`` after ``finish``. The source is opened before anything is created:
    ``src.open`` checks it is the very file judged (copy/source.py: a flipped link)."""
    sfd, sst = src.open()
    return copy_opened(sfd, sst, src.path, create, finish, discard, budget)


def copy_opened(
    sfd: int,
    sst: os.stat_result,
    src_path: str,
    create: Callable[[], int],
    finish: Callable[[int], None],
    discard: Callable[[], None],
    budget: int,
) -> tuple[int, os.stat_result]:
    """copy_new's work once the source is open (``sfd``, its fstat ``sst``); closes ``sfd``.
    The copy workers (copy/pool.py) run this: the main thread opened and checked the source."""
    try:
        if not stat.S_ISREG(sst.st_mode):
            raise OSError(f"{src_path} stopped being a regular file while syncing")
        dfd = create()
        try:
            total = _pump(sfd, dfd, budget, src_path, sst.st_size)
            finish(dfd)
            if TIMES_BY_FD:
                # The source's times, nanoseconds (cp -a does the same): a .pyc or a make
                # target compiled against the source stays valid in the copy. Taken from
                # the stat of the open source: a write after it changes the source's ctime,
                # so the next sync does not trust the record and compares bytes and mtime.
                os.utime(dfd, ns=(sst.st_atime_ns, sst.st_mtime_ns))
            written = os.fstat(dfd)
        except BaseException:
            os.close(dfd)
            dfd = -1
            with contextlib.suppress(OSError):
                discard()
            raise
        finally:
            if dfd >= 0:
                os.close(dfd)
        return total, written
    finally:
        os.close(sfd)


def _pump(sfd: int, dfd: int, budget: int, src_path: str, size: int = -1) -> int:
    """Copy ``sfd`` to its end into ``dfd``; more than ``budget`` bytes raises BudgetExceeded.

    ``size``: the source's size at open. Once exactly that many bytes are copied the copy
    stops without the read that would return end of file (one syscall of the three a small
    file costs, first-sync time). A source that grew after its stat is then copied at its
    stat's size, as same_bytes compares it: indistinguishable from one that grew right after
    the sync, and its changed stamps make the next sync compare it again.
    """
    total = 0
    use_sendfile = hasattr(os, "sendfile")  # not on Windows
    while True:
        if total == size:
            return total
        want = min(CHUNK, budget - total + 1)
        if size >= 0:
            # Never past the judged size: each call may return up to ``want``, and a file
            # appended to between the stat and the read had sendfile copy a whole CHUNK past
            # it, then on to end of file or the budget -- the whole remaining budget per
            # worker, so 64 files judged at 1 byte grew the copy to 64x the byte bound before
            # the refusal (tests/unit/test_copy_attacks.py).
            want = min(want, size - total)
        if use_sendfile:
            # sendfile copies in the kernel (what shutil.copyfile uses on Linux), with our own
            # fds so the O_EXCL/O_NOFOLLOW guarantees above hold.
            try:
                sent = os.sendfile(dfd, sfd, None, want)
            except OSError as err:
                # Some files a source link may point at refuse it: /proc/self/status gives
                # EINVAL (Linux 6.18); shutil falls back the same way, on the first call only.
                if total or err.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                use_sendfile = False
                continue
        else:
            data = _read_source(sfd, want, src_path)
            sent = len(data)
            view = memoryview(data)
            while view:
                view = view[os.write(dfd, view) :]
        if sent == 0:
            return total
        total += sent
        if total > budget:
            raise BudgetExceeded(src_path)


def _kind(entry: os.DirEntry[str]) -> Kind:
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"


class FdCopy:
    """The copy side through directory fds and O_NOFOLLOW (see the module docstring): the one
    copy_sync uses wherever the platform has them (Linux, macOS). Handles are directory fds."""

    def open_parent(self, path: str) -> int:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _COMMON)

    def open_root(self, name: str, parent: int) -> int:
        """Open the copy's root directory, making it (0700) or replacing a non-directory."""
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=parent)
            st = None
        if st is None:
            os.mkdir(name, ROOT_MODE, dir_fd=parent)
        elif stat.S_IMODE(st.st_mode) != ROOT_MODE:
            # Before opening it: a command's `chmod 000 .` in the copy would otherwise make
            # every later sync (as a non-root owner) and command fail here for good (issue 27).
            # By name: the lstat above saw a directory, and only the sync writes the parent.
            os.chmod(name, ROOT_MODE, dir_fd=parent)
        return open_dir(name, parent)

    def close(self, handle: int) -> None:
        os.close(handle)

    def kinds(self, handle: int) -> dict[str, Kind]:
        with os.scandir(handle) as it:
            # Inline, not _kind(): this runs for every entry of every resync.
            return {
                e.name: "dir"
                if e.is_dir(follow_symlinks=False)
                else "file"
                if e.is_file(follow_symlinks=False)
                else "other"
                for e in it
            }

    def lookup(self, name: str, parent: int) -> Kind | None:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        return "file" if stat.S_ISREG(st.st_mode) else "other"

    def lstat(self, name: str, parent: int) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def remove(self, name: str, parent: int, kind: Kind) -> int:
        return remove_entry(name, parent, kind == "dir")

    def readlink(self, name: str, parent: int) -> str | None:
        try:
            return os.readlink(name, dir_fd=parent)
        except OSError:
            return None  # not a link (EINVAL), or gone

    def symlink(self, target: str, name: str, parent: int) -> None:
        os.symlink(target, name, dir_fd=parent)

    def mkdir(self, name: str, parent: int) -> None:
        os.mkdir(name, 0o700, dir_fd=parent)

    def open_dir(self, name: str, parent: int) -> int:
        return open_dir(name, parent)

    def set_dir_mode(self, handle: int, mode: int) -> None:
        if stat.S_IMODE(os.fstat(handle).st_mode) != mode:
            os.fchmod(handle, mode)

    def set_dir_times(self, handle: int, atime_ns: int, mtime_ns: int) -> None:
        if os.fstat(handle).st_mtime_ns != mtime_ns:
            os.utime(handle, ns=(atime_ns, mtime_ns))

    def set_link_times(self, name: str, parent: int, atime_ns: int, mtime_ns: int) -> None:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if st.st_mtime_ns != mtime_ns:
            os.utime(name, ns=(atime_ns, mtime_ns), dir_fd=parent, follow_symlinks=False)

    def same_bytes(self, src: Source, name: str, parent: int, size: int, mode: int) -> bool:
        return same_bytes(src, name, parent, size, mode)

    def copy_file(
        self, src: Source, name: str, parent: int, mode: int, budget: int
    ) -> tuple[int, os.stat_result]:
        return copy_file(src, name, parent, mode, budget)
