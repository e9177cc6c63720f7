"""The racy-clean stamp record (copy_stamps) against plain byte comparison, on real files.

Every sync here is checked against the source byte by byte: a record that vouched for a file
it should not have leaves a copy that differs, and the test fails. Writes "within one tick"
are simply writes made microseconds apart: the kernel's coarse clock gives them the same
timestamps, which is exactly the case the rule exists for.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sprawl_orch.copy import fileops as copy_fileops
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.sync import Bounds, FileWork, sync
from sprawl_orch.core import fs_clock

MARGIN = fs_clock.TICK_MARGIN_NS / 1e9 + 0.01
# A simulated coarse filesystem: Linux >= 6.13 gives ext4/tmpfs "multigrain" timestamps, so two
# writes microseconds apart no longer share a stamp here. Rounding every stamp the rule sees
# down to 100 ms (and a 150 ms margin) brings the racy case back, as FAT or an older kernel has it.
COARSE_NS = 100_000_000


def _coarse(st: os.stat_result) -> os.stat_result:
    return _Coarse(st)  # type: ignore[return-value]


class _Coarse:
    def __init__(self, st: os.stat_result) -> None:
        self._st = st
        self.st_mtime_ns = st.st_mtime_ns // COARSE_NS * COARSE_NS
        self.st_ctime_ns = st.st_ctime_ns // COARSE_NS * COARSE_NS

    def __getattr__(self, name: str) -> object:
        return getattr(self._st, name)


def coarse_clock(monkeypatch: pytest.MonkeyPatch) -> float:
    """Make the rule see 100 ms stamps; returns the wait that passes its margin."""
    real_pack, real_newest = copy_stamps.pack, copy_stamps.newest
    monkeypatch.setattr(
        copy_stamps, "pack", lambda a, b, mode: real_pack(_coarse(a), _coarse(b), mode)
    )
    monkeypatch.setattr(copy_stamps, "newest", lambda a, b: real_newest(_coarse(a), _coarse(b)))
    monkeypatch.setattr(fs_clock, "TICK_MARGIN_NS", 150_000_000)
    return 0.16


pytestmark = pytest.mark.skipif(
    fs_clock.granularity_ns(os.stat(tempfile.gettempdir()).st_dev) is None,
    reason="the temporary directory's filesystem has no known timestamp margin",
)


def tree_bytes(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.lstat().st_mode))
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def tree_mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_mtime_ns for p in root.rglob("*")}


def assert_same(src: Path, copy: Path) -> None:
    """Same bytes and bits, and the same mtimes (files and directories, nanoseconds)."""
    assert tree_bytes(copy) == tree_bytes(src)
    assert tree_mtimes(copy) == tree_mtimes(src)


class Counting:
    """Counts the byte comparisons the sync falls back to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = copy_fileops.same_bytes

        def counted(*args: object) -> bool:
            self.calls += 1
            return real(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(copy_fileops, "same_bytes", counted)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    src, copy, record = tmp_path / "src", tmp_path / "copy", tmp_path / "stamps"
    (src / "d").mkdir(parents=True)
    for i in range(20):
        (src / ("d" if i % 2 else "") / f"f{i}").write_bytes(b"%08d" % i)
    return src, copy, record


def settle(src: Path, copy: Path, record: Path) -> None:
    """Sync, wait out the margin, sync again: the record now vouches for every file."""
    sync(src, copy, record=record)
    time.sleep(MARGIN)
    sync(src, copy, record=record)
    time.sleep(MARGIN)


def test_a_quiet_resync_compares_no_bytes(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = setup
    settle(src, copy, record)
    count = Counting(monkeypatch)
    before = record.stat()
    assert sync(src, copy, record=record) == FileWork(created=0, rewritten=0, removed=0, walked=21)
    assert count.calls == 0
    assert_same(src, copy)
    # Nothing new to say: the record is left as it was (not even rewritten).
    assert (record.stat().st_ino, record.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    (src / "d" / "new").write_bytes(b"n")
    assert sync(src, copy, record=record).created == 1
    assert record.stat().st_ino != before.st_ino


def test_a_fresh_copy_is_not_trusted_until_the_margin_passed(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = setup
    sync(src, copy, record=record)
    count = Counting(monkeypatch)
    sync(src, copy, record=record)  # copies written during the last sync: too young to trust
    assert count.calls == 20


@pytest.mark.parametrize("side", ["source", "copy"])
def test_same_length_rewrite_in_the_tick_of_the_sync(
    setup: tuple[Path, Path, Path], side: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = setup
    wait = coarse_clock(monkeypatch)
    sync(src, copy, record=record)
    time.sleep(wait)
    sync(src, copy, record=record)
    time.sleep(wait)
    target = (src if side == "source" else copy) / "f4"
    target.write_bytes(b"XXXXXXXX")  # same length, then a sync in the same tick
    sync(src, copy, record=record)
    target.write_bytes(b"YYYYYYYY")  # and again right after it: same tick, same stamps
    sync(src, copy, record=record)
    assert_same(src, copy)


@pytest.mark.parametrize("side", ["source", "copy"])
@pytest.mark.parametrize("delta_ns", [-1, 1, -86_400_000_000_000, 86_400_000_000_000])
def test_mtime_alone_moved_is_resynced(
    setup: tuple[Path, Path, Path], side: str, delta_ns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes and bits equal, mtime set back or forward on either side (by 1 ns, inside any
    timestamp tick, or by a day): the copy gets the source's mtime again (issue 23)."""
    src, copy, record = setup
    settle(src, copy, record)
    target = (src if side == "source" else copy) / "d" / "f3"
    now = target.stat()
    os.utime(target, ns=(now.st_atime_ns, now.st_mtime_ns + delta_ns))
    count = Counting(monkeypatch)
    assert sync(src, copy, record=record).rewritten == 1
    assert count.calls == 0  # the mtime decides before any byte is read
    assert_same(src, copy)
    assert sync(src, copy, record=record) == FileWork(created=0, rewritten=0, removed=0, walked=21)


@pytest.mark.parametrize("side", ["source", "copy"])
def test_mtime_set_back_with_utime_is_seen(setup: tuple[Path, Path, Path], side: str) -> None:
    src, copy, record = setup
    settle(src, copy, record)
    target = (src if side == "source" else copy) / "d" / "f3"
    before = target.stat()
    target.write_bytes(b"ZZZZZZZZ")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # ctime moves anyway
    assert target.stat().st_mtime_ns == before.st_mtime_ns
    work = sync(src, copy, record=record)
    assert work.rewritten == 1
    assert_same(src, copy)


@pytest.mark.parametrize("damage", ["absent", "torn", "garbage", "flipped"])
def test_a_damaged_record_means_compare_bytes(
    setup: tuple[Path, Path, Path], damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = setup
    settle(src, copy, record)
    data = record.read_bytes()
    (src / "f0").write_bytes(b"changed!")
    if damage == "absent":
        record.unlink()
    elif damage == "torn":
        record.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        record.write_bytes(os.urandom(len(data)))
    else:
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 1
        record.write_bytes(bytes(flipped))
    assert copy_stamps.load(record) is None
    count = Counting(monkeypatch)
    assert sync(src, copy, record=record).rewritten == 1
    # f0's mtime moved with its bytes (settle waited past the tick): it is copied afresh
    # without a comparison; the other 19 have their bytes compared.
    assert count.calls == 19
    assert_same(src, copy)


def test_a_version_3_record_is_not_trusted(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record's digest became SHA-256 (version 4, copy_stamps.MAGIC): a record the last
    version wrote -- its magic, a BLAKE2b digest -- loads as None, and every byte is compared."""
    src, copy, record = setup
    settle(src, copy, record)
    body = record.read_bytes()[:-32]
    old = b"SPRSTMP3" + body[len(copy_stamps.MAGIC) :]
    record.write_bytes(old + hashlib.blake2b(old, digest_size=32).digest())
    assert copy_stamps.load(record) is None
    count = Counting(monkeypatch)
    assert sync(src, copy, record=record) == FileWork(created=0, rewritten=0, removed=0, walked=21)
    assert count.calls == 20
    assert copy_stamps.load(record) is not None  # written anew in the current version
    assert_same(src, copy)


def test_a_sync_killed_midway_leaves_a_sound_record(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, record = setup
    settle(src, copy, record)
    for i in range(20):
        (src / ("d" if i % 2 else "") / f"f{i}").write_bytes(b"%08d" % (i + 100))
    real = copy_fileops.copy_opened
    done = [0]
    lock = threading.Lock()

    def dies_after_five(*args: object) -> object:
        with lock:  # copy workers (copy/pool.py) call it side by side
            done[0] += 1
            dies = done[0] > 5
        if dies:
            raise KeyboardInterrupt  # as good as SIGKILL for what is on disk
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(copy_fileops, "copy_opened", dies_after_five)
    with pytest.raises(KeyboardInterrupt):
        sync(src, copy, record=record)
    monkeypatch.setattr(copy_fileops, "copy_opened", real)
    work = sync(src, copy, record=record)
    # Five were written; the sixth, and any the walk handed out before it heard of the
    # failure (cancelled unstarted), were deleted and never written: created now. Every one
    # of the 15 changed files is written again, none trusted from the killed sync's record.
    assert work.created >= 1 and work.created + work.rewritten == 15, work
    assert_same(src, copy)


def test_record_round_trip_keeps_every_field(setup: tuple[Path, Path, Path]) -> None:
    src, copy, record = setup
    (src / "link").symlink_to("d/f1")
    (src / "caf\udce9").write_bytes(b"not utf-8 name")
    sync(src, copy, record=record)
    got = copy_stamps.load(record)
    assert got is not None
    assert got.source == os.path.realpath(src) and got.links == {"link": "d/f1"}
    assert got.dirs == ["d"] and len(got.paths) == 21 and "caf\udce9" in got.paths
    entry = got.file(os.path.join("d", "f1"))
    assert entry is not None
    assert entry.source == copy_stamps.stamp_of((src / "d" / "f1").stat())
    assert entry.copy == copy_stamps.stamp_of((copy / "d" / "f1").stat())
    assert entry.mode == stat.S_IMODE((src / "d" / "f1").stat().st_mode)
    assert got.total_bytes == sum(len(b) for b, _ in tree_bytes(src).values())


# --- the property: whatever happens on either side, in whichever tick, the copy is exact ----

NAMES = ["a", "b", os.path.join("d", "c")]
CONTENT = st.sampled_from([b"00000000", b"11111111", b"22222222", b"333", b""])
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.sampled_from(["src", "copy"]),
            st.sampled_from(NAMES),
            CONTENT,
            st.booleans(),
        ),
        st.tuples(
            st.just("chmod"),
            st.sampled_from(["src", "copy"]),
            st.sampled_from(NAMES),
            st.sampled_from([0o644, 0o755, 0o600]),
            st.just(False),
        ),
        # The mtime alone set back or forward, bytes untouched: by 1 ns (within any tick)
        # or by an hour; the copy must end with the source's mtime either way.
        st.tuples(
            st.just("utime"),
            st.sampled_from(["src", "copy"]),
            st.sampled_from(NAMES),
            st.sampled_from([-3_600_000_000_000, -1, 1, 3_600_000_000_000]),
            st.just(False),
        ),
        st.tuples(st.just("sync"), st.just(""), st.just(""), st.just(b""), st.just(False)),
        st.tuples(st.just("wait"), st.just(""), st.just(""), st.just(b""), st.just(False)),
    ),
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, coarse=st.booleans())
def test_property_record_never_hides_a_change(
    ops: list[tuple[str, str, str, object, bool]], coarse: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        wait = coarse_clock(patch) if coarse else MARGIN
        src, copy, record = Path(tmp, "src"), Path(tmp, "copy"), Path(tmp, "stamps")
        (src / "d").mkdir(parents=True)
        for name in NAMES:
            (src / name).write_bytes(b"initial!")
        sync(src, copy, record=record)
        for op, where, name, arg, set_back in ops:
            root = src if where == "src" else copy
            if op == "write":
                target = root / name
                before = target.stat() if target.exists() else None
                assert isinstance(arg, bytes)
                if where == "copy" and target.exists():
                    target.chmod(0o644 | stat.S_IWUSR)
                target.write_bytes(arg)
                if set_back and before is not None:
                    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
            elif op == "chmod":
                assert isinstance(arg, int)
                if (root / name).exists():
                    (root / name).chmod(arg)
            elif op == "utime":
                assert isinstance(arg, int)
                if (root / name).exists():
                    now = (root / name).stat()
                    os.utime(root / name, ns=(now.st_atime_ns, now.st_mtime_ns + arg))
            elif op == "wait":
                time.sleep(wait)
            else:
                sync(src, copy, record=record)
                assert_same(src, copy)
        sync(src, copy, record=record)
        assert_same(src, copy)
        shutil.rmtree(tmp, ignore_errors=True)


def test_bounds_still_apply_with_a_record(setup: tuple[Path, Path, Path]) -> None:
    src, copy, record = setup
    settle(src, copy, record)
    with pytest.raises(Exception, match="max_files = 5"):
        sync(src, copy, Bounds(files=5), record=record)
    assert not copy.exists() and not record.exists()
