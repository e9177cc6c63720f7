"""Writers that never take a slot's lock (design §5.1): the next lease's sync undoes them.

A copy lives in the caller's state directory, so a process of the caller's uid -- a daemon a
copied_tree command left, the agent's own tools -- can write it between two commands without
the lock. Today's resync lstat-s the copy side and sees the moved ctime. These tests pin that,
where a remembered copy side (issue 26 item 4, design §5.1) sits: after ``release``, before the
next ``lease``. Here no memory is kept (the store alone, as the in-process CLI); with one, the
writer note is the safeguard (test_copy_memory_real: a copied_tree command writing in place).
Each write keeps the file's size and puts its mtime back, so only the ctime tells.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.store import CopyStore, Lease, copy_key
from sprawl_orch.copy.sync import FileWork

SOURCE = b"x = 1\n" * 100
PLANTED = b"y = 2\n" * 100  # same length: the size does not tell
# Writes in place (no O_TRUNC: the same inode), then puts the mtime back: only ctime moves.
WRITER = (
    "import os, sys\n"
    "path, data = sys.argv[1], sys.argv[2].encode()\n"
    "before = os.lstat(path)\n"
    "fd = os.open(path, os.O_WRONLY)\n"
    "os.pwrite(fd, data, 0)\n"
    "os.close(fd)\n"
    "os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns), follow_symlinks=False)\n"
)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_bytes(SOURCE)
    (root / "README").write_bytes(b"hello\n")
    return root


def synced_twice(store: CopyStore, src: Path) -> Lease:
    """A lease whose copy was synced, then resynced with nothing changed (a command ran)."""
    lease = store.lease(src, copy_key(src, "{}"))
    assert lease.sync(src, Bounds(), Excludes()).created == 2
    quiet = lease.sync(src, Bounds(), Excludes())
    assert quiet == FileWork(created=0, rewritten=0, removed=0, walked=3)
    return lease


def write_outside_the_lock(path: Path, data: bytes) -> None:
    """Another process, holding no lock, writes ``path`` in place."""
    before = os.lstat(path)
    subprocess.run([sys.executable, "-c", WRITER, str(path), data.decode()], check=True)
    after = os.lstat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


def test_a_write_in_place_after_release_is_undone_by_the_next_lease(
    tmp_path: Path, src: Path
) -> None:
    store = CopyStore(tmp_path / "copies", budget_bytes=10**9)
    first = synced_twice(store, src)
    slot, target = first.slot, first.path / "pkg" / "mod.py"
    first.release()
    write_outside_the_lock(target, PLANTED)
    second = store.lease(src, copy_key(src, "{}"))
    assert second.slot == slot
    work = second.sync(src, Bounds(), Excludes())
    assert (work.created, work.rewritten, work.removed) == (0, 1, 0)
    assert target.read_bytes() == SOURCE
    second.release()


def test_a_write_through_a_hard_link_made_outside_the_copy_is_undone(
    tmp_path: Path, src: Path
) -> None:
    """The link outside the copy was made while a command ran (copied_tree runs as the caller,
    in no namespace); the write through it comes after release, under no watched name."""
    store = CopyStore(tmp_path / "copies", budget_bytes=10**9)
    first = synced_twice(store, src)
    target = first.path / "pkg" / "mod.py"
    outside = tmp_path / "kept-by-a-daemon"
    os.link(target, outside)
    first.release()
    write_outside_the_lock(outside, PLANTED)
    assert target.read_bytes() == PLANTED
    second = store.lease(src, copy_key(src, "{}"))
    assert second.sync(src, Bounds(), Excludes()).rewritten == 1
    assert target.read_bytes() == SOURCE
    assert outside.read_bytes() == PLANTED  # the copy's file is a new inode, not written through
    second.release()


def test_a_directory_touched_after_release_gets_its_times_back(tmp_path: Path, src: Path) -> None:
    """No entry changed, only a directory's times: the sync sets every directory's times from
    the source (issue 23), so a memory must count a directory whose ctime moved as changed."""
    store = CopyStore(tmp_path / "copies", budget_bytes=10**9)
    first = synced_twice(store, src)
    pkg = first.path / "pkg"
    first.release()
    os.utime(pkg, ns=(1, 1))
    second = store.lease(src, copy_key(src, "{}"))
    work = second.sync(src, Bounds(), Excludes())
    assert (work.created, work.rewritten, work.removed) == (0, 0, 0)
    assert os.lstat(pkg).st_mtime_ns == os.lstat(src / "pkg").st_mtime_ns
    second.release()
