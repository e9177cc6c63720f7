"""Copy workers (copy/pool.py): a first sync written by worker threads keeps everything the
serial one kept -- bytes, permission bits, mtimes in nanoseconds (directories' set after their
last entry), links, empty directories, a deterministic stamp record -- and a refusal or a
failure midway leaves no copy and no record behind, and no worker or fd running on."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.copy import fileops as copy_fileops
from sprawl_orch.copy import pool as copy_pool
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy import sync as copy_sync
from sprawl_orch.copy.fileops import FdCopy
from sprawl_orch.copy.sync import Bounds, sync
from sprawl_orch.core.errors import CopyBoundError, ErrorCode, SprawlError

# More files in one directory than the workers may hold at once: the walk leaves directories
# while their files are still being written (their times wait for the last one).
MANY = copy_pool.MAX_INFLIGHT * 3


@pytest.fixture(autouse=True)
def fd_side(monkeypatch: pytest.MonkeyPatch) -> None:
    if not copy_sync.dir_fds_work():
        pytest.skip("copy workers run only where the copy side is directory fds")
    monkeypatch.setattr(copy_sync, "COPY_SIDE", FdCopy())


def make(src: Path) -> None:
    """Files of many sizes and bits in nested and flat directories, empty directories, kept
    links, every mtime set to an odd nanosecond value (no clock would give it)."""
    (src / "big" / "deep" / "er").mkdir(parents=True)
    (src / "empty" / "inner-empty").mkdir(parents=True)
    for i in range(MANY):
        f = src / "big" / f"f{i:04d}"
        f.write_bytes(os.urandom(i * 37 % 5000))
        f.chmod((0o600, 0o644, 0o755, 0o640, 0o700)[i % 5])
        os.utime(f, ns=(1_500_000_000_123_456_789 + i, 1_600_000_000_987_654_321 + i * 1_001))
    for i in range(20):
        (src / "big" / "deep" / "er" / f"g{i}").write_bytes(b"g" * (i * 100_003 % 300_000))
    (src / "top.txt").write_text("top")
    (src / "link").symlink_to("big/f0001")
    (src / "dirlink").symlink_to("big/deep")
    os.utime(
        src / "link",
        ns=(1_400_000_000_000_000_001, 1_400_000_000_000_000_003),
        follow_symlinks=False,
    )
    for d in ("empty/inner-empty", "empty", "big/deep/er", "big/deep", "big", "."):
        os.utime(src / d, ns=(1_300_000_000_000_000_007, 1_300_000_000_111_111_111))


def assert_kept(src: Path, copy: Path) -> int:
    """Every entry: same kind, bytes, bits, link target and mtime (ns); returns how many."""
    seen = 0
    for here, dirs, files in os.walk(src):
        rel = os.path.relpath(here, src)
        for name in [*dirs, *files, "."]:
            s, c = Path(here, name), copy / rel / name
            ls, lc = s.lstat(), c.lstat()
            assert stat.S_IFMT(ls.st_mode) == stat.S_IFMT(lc.st_mode), s
            assert ls.st_mtime_ns == lc.st_mtime_ns, s
            if stat.S_ISLNK(ls.st_mode):
                assert os.readlink(s) == os.readlink(c), s
            elif stat.S_ISREG(ls.st_mode):
                assert stat.S_IMODE(ls.st_mode) == stat.S_IMODE(lc.st_mode), s
                assert s.read_bytes() == c.read_bytes(), s
            elif name != "." or rel != ".":
                assert stat.S_IMODE(lc.st_mode) == stat.S_IMODE(ls.st_mode) | 0o700, s
            seen += 1
    return seen


def writers(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The names of the threads that write copy files during the test."""
    names: set[str] = set()
    real = copy_fileops.copy_opened

    def noted(*args: Any) -> tuple[int, os.stat_result]:
        names.add(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(copy_fileops, "copy_opened", noted)
    return names


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def test_workers_keep_bytes_bits_mtimes_links_and_empty_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = tmp_path / "src", tmp_path / "copy", tmp_path / "copy.stamps"
    src.mkdir()
    make(src)
    names = writers(monkeypatch)
    work = sync(src, copy, record=record)
    assert names == {"sprawl-copy"}, names  # every file was written by a copy worker
    assert work.created == MANY + 20 + 3  # top.txt and the two kept links
    assert (copy / "empty" / "inner-empty").is_dir()
    # files and links; 5 directories by their names in their parents and 6 by themselves
    assert assert_kept(src, copy) == MANY + 20 + 3 + 5 + 6
    assert not [t for t in threading.enumerate() if t.name == "sprawl-copy"]


def test_the_record_is_in_walk_order_and_names_each_written_copy(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    make(src)
    records = []
    for n in (1, 2):
        copy, record = tmp_path / f"copy{n}", tmp_path / f"copy{n}.stamps"
        sync(src, copy, record=record)
        got = copy_stamps.load(record)
        assert got is not None
        for rel in got.paths:  # each entry filled in from its worker's fstat of the copy
            entry = got.file(rel)
            assert entry is not None
            assert entry.copy == copy_stamps.stamp_of((copy / rel).stat()), rel
            assert entry.source == copy_stamps.stamp_of((src / rel).stat()), rel
        records.append((got.paths, got.dirs, got.links))
    assert records[0] == records[1]  # whatever order the workers finished in


def test_a_bytes_refusal_midway_leaves_nothing_and_stops_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = tmp_path / "src", tmp_path / "copy", tmp_path / "copy.stamps"
    src.mkdir()
    make(src)
    names = writers(monkeypatch)
    before = open_fds()
    total = sum(f.stat().st_size for f in src.rglob("*") if f.is_file() and not f.is_symlink())
    with pytest.raises(CopyBoundError) as refused:
        sync(src, copy, Bounds(bytes=total // 2), record=record)
    assert refused.value.bound == "bytes"
    assert names == {"sprawl-copy"}  # refused while workers were writing
    assert not os.path.lexists(copy) and not os.path.lexists(record)
    assert not [t for t in threading.enumerate() if t.name == "sprawl-copy"]
    assert open_fds() == before


def test_a_worker_failure_is_the_error_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = tmp_path / "src", tmp_path / "copy", tmp_path / "copy.stamps"
    src.mkdir()
    make(src)
    real = copy_fileops.copy_opened
    calls = [0]
    lock = threading.Lock()

    def full_disk_at_the_hundredth(*args: Any) -> tuple[int, os.stat_result]:
        with lock:
            calls[0] += 1
            fail = calls[0] == 100
        if fail:
            os.close(args[0])  # as copy_opened does on every way out
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args)

    monkeypatch.setattr(copy_fileops, "copy_opened", full_disk_at_the_hundredth)
    before = open_fds()
    with pytest.raises(SprawlError) as failed:
        sync(src, copy, record=record)
    assert failed.value.code == ErrorCode.STORAGE_FATAL
    assert "No space left on device" in failed.value.detail
    assert calls[0] < MANY + 20 + 1  # the rest were cancelled, not all written
    assert not os.path.lexists(copy) and not os.path.lexists(record)
    assert not [t for t in threading.enumerate() if t.name == "sprawl-copy"]
    assert open_fds() == before
    # The next sync starts from nothing and makes the whole copy.
    monkeypatch.setattr(copy_fileops, "copy_opened", real)
    sync(src, copy, record=record)
    assert_kept(src, copy)


@pytest.mark.parametrize("count", [0, 1])
def test_any_worker_count_makes_the_same_copy_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """WORKERS is chosen by measurement (copy/pool.py); 0 copies on the walk's thread. The
    copy, its record and who wrote it follow the count; nothing else does."""
    src = tmp_path / "src"
    src.mkdir()
    make(src)
    sync(src, tmp_path / "ref", record=tmp_path / "ref.stamps")
    monkeypatch.setattr(copy_pool, "WORKERS", count)
    names = writers(monkeypatch)
    copy, record = tmp_path / "copy", tmp_path / "copy.stamps"
    work = sync(src, copy, record=record)
    assert names == ({threading.current_thread().name} if count == 0 else {"sprawl-copy"})
    assert work.created == MANY + 20 + 3
    assert assert_kept(src, copy) == MANY + 20 + 3 + 5 + 6
    got, ref = copy_stamps.load(record), copy_stamps.load(tmp_path / "ref.stamps")
    assert got is not None and ref is not None
    assert (got.paths, got.dirs, got.links) == (ref.paths, ref.dirs, ref.links)
    for rel in got.paths:
        entry = got.file(rel)
        assert entry is not None and entry.copy == copy_stamps.stamp_of((copy / rel).stat())
    assert not [t for t in threading.enumerate() if t.name == "sprawl-copy"]


def test_without_workers_a_failure_midway_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = tmp_path / "src", tmp_path / "copy", tmp_path / "copy.stamps"
    src.mkdir()
    make(src)
    monkeypatch.setattr(copy_pool, "WORKERS", 0)
    real = copy_fileops.copy_opened
    calls = [0]

    def full_disk_at_the_hundredth(*args: Any) -> tuple[int, os.stat_result]:
        calls[0] += 1
        if calls[0] == 100:
            os.close(args[0])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args)

    monkeypatch.setattr(copy_fileops, "copy_opened", full_disk_at_the_hundredth)
    before = open_fds()
    with pytest.raises(SprawlError) as failed:
        sync(src, copy, record=record)
    assert "No space left on device" in failed.value.detail
    assert calls[0] == 100  # raised at once: the walk settles an inline job before the next
    assert not os.path.lexists(copy) and not os.path.lexists(record)
    assert open_fds() == before
    total = sum(f.stat().st_size for f in src.rglob("*") if f.is_file() and not f.is_symlink())
    monkeypatch.setattr(copy_fileops, "copy_opened", real)
    with pytest.raises(CopyBoundError):
        sync(src, copy, Bounds(bytes=total // 2), record=record)
    assert not os.path.lexists(copy) and not os.path.lexists(record)
    assert open_fds() == before
