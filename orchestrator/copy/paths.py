"""The synced copy's copy side by path: the fallback for platforms without directory fds.

Why it exists: copy_fileops works through directory fds (``O_DIRECTORY``, ``dir_fd=``,
``O_NOFOLLOW``), and Windows has none of them (``os.supports_dir_fd`` is empty there), so
without this the copy -- and with it every sandbox arm -- could not run on Windows. copy_sync
picks it once, by probing capability rather than the platform's name (psutil's pattern), and
the walk itself (counts, bounds, which entries are replaced) is copy_sync's for both variants.

The same rules hold, by path:

- a copy-side entry is looked at with ``lstat`` only, and an entry ``lstat`` shows as a link
  -- or, on Windows, any reparse point: a directory junction is not a link to ``S_ISLNK`` but
  is a door all the same -- is never opened or entered, only deleted (``os.unlink``; Windows'
  ``os.unlink`` removes directory links and junctions themselves, never their targets);
- a directory is only entered after ``lstat`` shows a real one, and a copy file is only read
  after ``lstat`` shows a regular file, whose identity (device, inode) ``fstat`` then checks
  again on the opened fd;
- new files are created ``O_CREAT | O_EXCL`` (``CREATE_NEW`` on Windows), which refuses any
  existing entry, a planted link included: each file we write is a new directory entry, and
  nothing a command hard-linked elsewhere is ever written through.

What it lacks compared with the dir-fd walk: every operation resolves a path through the copy
again, so a concurrent writer in the copy could swap a directory we checked for a link
between our ``lstat`` and our use of the path (a time-of-check race), and redirect that one
operation outside the copy. The dir-fd walk holds each checked directory open and has no such
window. It holds here because nothing writes the copy while we sync: a tool's commands start
only after its sync returns, and on Windows the Job Object (kill on close) ends everything a
command started before the next sync. On the copied_tree arm (no process-tree guarantee) a
process a command left running could still write; that is the case this variant cannot close.

Paths get long where the dir-fd walk has no limit: a tree a command nested thousands of levels
deep is removed by hoisting deep directories up to the top of the tree being removed
(``rename``), so no path we build grows past ``_HOIST_AT`` characters below that top. Windows
without long-path support still refuses paths over 260 characters (MAX_PATH), which then
fails the sync (E_STORAGE_FATAL) rather than doing anything unsafe.
"""

from __future__ import annotations

import errno
import os
import stat

from sprawl_orch.copy.fileops import (
    CREATE_FLAGS,
    READ_FLAGS,
    ROOT_MODE,
    TIMES_BY_FD,
    Kind,
    Source,
    copy_new,
    same_content,
)
from sprawl_orch.core.removal import kind_of, remove_tree_by_path, unlink_path


def _set_mode(path: str, fd: int, mode: int) -> None:
    if os.chmod in os.supports_fd:
        os.fchmod(fd, mode)
    # Windows before 3.13 has no fchmod; its chmod only sets or clears the read-only
    # attribute, and it runs once the file is closed (below, in copy_file).


class PathCopy:
    """The copy side by path (see the module docstring). Handles are the directories' paths,
    each one ``lstat`` showed to be a real directory when it was opened."""

    def open_parent(self, path: str) -> str:
        if not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return path

    def open_root(self, name: str, parent: str) -> str:
        kind = self.lookup(name, parent)
        if kind is not None and kind != "dir":
            self.remove(name, parent, kind)
            kind = None
        if kind is None:
            self.mkdir(name, parent)
        else:  # a command's `chmod 000 .` must not break the copy (copy_fileops.open_root)
            self.set_dir_mode(os.path.join(parent, name), ROOT_MODE)
        return self.open_dir(name, parent)

    def close(self, handle: str) -> None:
        return None

    def kinds(self, handle: str) -> dict[str, Kind]:
        with os.scandir(handle) as it:
            return {e.name: kind_of(e.stat(follow_symlinks=False)) for e in it}

    def lookup(self, name: str, parent: str) -> Kind | None:
        try:
            return kind_of(os.lstat(os.path.join(parent, name)))
        except FileNotFoundError:
            return None

    def lstat(self, name: str, parent: str) -> os.stat_result | None:
        try:
            return os.lstat(os.path.join(parent, name))
        except FileNotFoundError:
            return None

    def readlink(self, name: str, parent: str) -> str | None:
        try:
            return os.readlink(os.path.join(parent, name))
        except OSError:
            return None

    def symlink(self, target: str, name: str, parent: str) -> None:
        os.symlink(target, os.path.join(parent, name))

    def remove(self, name: str, parent: str, kind: Kind) -> int:
        path = os.path.join(parent, name)
        if kind == "dir":
            return remove_tree_by_path(path)
        unlink_path(path, kind)
        return 1

    def mkdir(self, name: str, parent: str) -> None:
        os.mkdir(os.path.join(parent, name), 0o700)

    def open_dir(self, name: str, parent: str) -> str:
        path = os.path.join(parent, name)
        if kind_of(os.lstat(path)) != "dir":
            raise NotADirectoryError(errno.ENOTDIR, "not a directory (or a link to one)", path)
        return path

    def set_dir_mode(self, handle: str, mode: int) -> None:
        if stat.S_IMODE(os.lstat(handle).st_mode) != mode:
            os.chmod(handle, mode)

    def set_dir_times(self, handle: str, atime_ns: int, mtime_ns: int) -> None:
        if os.lstat(handle).st_mtime_ns != mtime_ns:
            os.utime(handle, ns=(atime_ns, mtime_ns))

    def set_link_times(self, name: str, parent: str, atime_ns: int, mtime_ns: int) -> None:
        path = os.path.join(parent, name)
        if os.utime not in os.supports_follow_symlinks:
            return  # Windows: a link's own times cannot be set without following it
        if os.lstat(path).st_mtime_ns != mtime_ns:
            os.utime(path, ns=(atime_ns, mtime_ns), follow_symlinks=False)

    def same_bytes(self, src: Source, name: str, parent: str, size: int, mode: int) -> bool:
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
            if kind_of(st) != "file" or st.st_size != size or stat.S_IMODE(st.st_mode) != mode:
                return False
            dfd = os.open(path, READ_FLAGS)
        except OSError:
            return False  # gone, or (O_NOFOLLOW where there is one) a link since the lstat
        try:
            now = os.fstat(dfd)
            if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (
                st.st_dev,
                st.st_ino,
            ):
                return False  # replaced since the lstat: it differs and will be replaced
            return same_content(src, dfd, size)
        finally:
            os.close(dfd)

    def copy_file(
        self, src: Source, name: str, parent: str, mode: int, budget: int
    ) -> tuple[int, os.stat_result]:
        path = os.path.join(parent, name)
        total, written = copy_new(
            src,
            lambda: os.open(path, CREATE_FLAGS, 0o600),
            lambda fd: _set_mode(path, fd, mode),
            lambda: unlink_path(path, "file"),
            budget,
        )
        if os.chmod not in os.supports_fd:
            os.chmod(path, mode)
            written = os.lstat(path)
        if not TIMES_BY_FD:
            # No futimens here (Windows): the source's times by path, after the file closed.
            sst = os.stat(src.path)
            os.utime(path, ns=(sst.st_atime_ns, sst.st_mtime_ns))
            written = os.lstat(path)
        return total, written
