"""The walk after a command (changes.compute) on a record built on the sync's own stamps
(change_record.finish) and on one built by walking the copy (``walk=True``, the container
arms' re-owned copies): what a command can do to hide a change, each found, and a no-change
command found to change nothing while the fast path (trusted stamps) is really taken."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from sprawl_orch.changes import changes
from sprawl_orch.changes import record as change_record
from sprawl_orch.changes.changes import compute
from sprawl_orch.changes.record import SyncRecord
from sprawl_orch.copy.sync import sync_with_record
from sprawl_orch.core import fs_clock


class Copy:
    def __init__(self, tmp_path: Path, walk: bool) -> None:
        self.source, self.copy, self.walk = tmp_path / "src", tmp_path / "copy", walk
        self.stamps = tmp_path / "stamps"
        for i in range(3):
            d = self.source / f"d{i}"
            d.mkdir(parents=True)
            for j in range(4):
                (d / f"f{j}.txt").write_text(f"file {i}.{j}\n")
        (self.source / "top.txt").write_text("top\n")
        (self.source / "link").symlink_to("d0/f0.txt")
        sync_with_record(self.source, self.copy, record=self.stamps)
        # Older than the sync's margin, as any file not just written: the trusted path.
        assert fs_clock.granularity_ns(self.copy.stat().st_dev) == fs_clock.TICK_MARGIN_NS
        time.sleep(fs_clock.TICK_MARGIN_NS / 1e9 + 0.05)
        _, synced = sync_with_record(self.source, self.copy, record=self.stamps)
        assert synced.copy_ctimes is not None
        self.record: SyncRecord = change_record.finish(self.copy, synced, self.source, walk=walk)

    def changes(self) -> list[tuple[str, str]]:
        return [(e.path, e.change) for e in compute(self.record, self.source, self.copy)]


def hidden_edit(f: Path, text: str) -> None:
    """Same size, mtime set back: only the ctime (and the bytes) tell."""
    before = f.stat()
    f.write_text(text)
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.fixture(params=[False, True], ids=["built-on-sync", "walked"])
def synced(request: pytest.FixtureRequest, tmp_path: Path) -> Copy:
    return Copy(tmp_path, request.param)


def test_no_change_is_none_and_every_stamp_is_trusted(synced: Copy) -> None:
    stamps = dict(synced.record.entries())
    assert len(stamps) == 3 + 12 + 2  # directories, files, top.txt and the link
    assert all(synced.record.copy_trusted(s) for s in stamps.values())
    assert synced.changes() == []


def test_same_size_edit_with_mtime_restored(synced: Copy) -> None:
    hidden_edit(synced.copy / "d1" / "f2.txt", "FILE 1.2\n")
    assert synced.changes() == [("d1/f2.txt", "modified")]


def test_touch_chmod_back_and_same_bytes_rewrite_are_no_change(synced: Copy) -> None:
    os.utime(synced.copy / "d0" / "f0.txt")
    f = synced.copy / "d0" / "f1.txt"
    f.chmod(0o600)
    f.chmod(stat.S_IMODE((synced.source / "d0" / "f1.txt").stat().st_mode))
    g = synced.copy / "d2" / "f3.txt"
    data = g.read_bytes()
    g.unlink()
    g.write_bytes(data)
    assert synced.changes() == []


def test_rename_over_another_file_is_found(synced: Copy) -> None:
    # f1's inode now under f0's name: f0's bytes differ, f1 is gone.
    os.rename(synced.copy / "d0" / "f1.txt", synced.copy / "d0" / "f0.txt")
    assert synced.changes() == [("d0/f0.txt", "modified"), ("d0/f1.txt", "deleted")]


def test_another_inode_with_the_recorded_ctime_is_not_trusted(synced: Copy) -> None:
    # Files written in one clock tick share a ctime, and some filesystems keep a renamed
    # inode's ctime: a name whose directory changed is trusted only with its own inode.
    was = synced.record.was("d0", "f0.txt")
    other = os.lstat(synced.copy / "d0" / "f1.txt")
    assert was is not None
    forged = (was[0], was[1], was[2], other.st_ctime_ns, was[4], was[5])
    line = synced.record.trusted_below_ns
    assert not changes._untouched(other, forged, line, strict=False)
    assert changes._untouched(os.lstat(synced.copy / "d0" / "f0.txt"), was, line, False)


def test_mode_change_is_found(synced: Copy) -> None:
    (synced.copy / "top.txt").chmod(0o755)
    assert synced.changes() == [("top.txt", "mode_changed")]


def test_directory_replaced_by_a_link(synced: Copy) -> None:
    d = synced.copy / "d2"
    for f in d.iterdir():
        f.unlink()
    d.rmdir()
    d.symlink_to("d1")
    found = synced.changes()
    assert ("d2", "kind_changed") in found
    assert sorted(p for p, c in found if c == "deleted") == [f"d2/f{j}.txt" for j in range(4)]


def test_new_file_in_a_directory_whose_times_are_restored(synced: Copy) -> None:
    d = synced.copy / "d1"
    before = d.stat()
    (d / "new.txt").write_text("new\n")
    os.utime(d, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert synced.changes() == [("d1/new.txt", "created")]


def test_deleted_file_and_hard_link(synced: Copy) -> None:
    (synced.copy / "d2" / "f0.txt").unlink()
    os.link(synced.copy / "d1" / "f0.txt", synced.copy / "d1" / "again.txt")
    assert synced.changes() == [("d1/again.txt", "created"), ("d2/f0.txt", "deleted")]


def test_link_retargeted(synced: Copy) -> None:
    (synced.copy / "link").unlink()
    (synced.copy / "link").symlink_to("d0/f1.txt")
    assert synced.changes() == [("link", "modified")]


def test_with_a_mount_inside_devices_are_compared(
    synced: Copy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A FUSE mount could show any inode and ctime: no directory's stamp vouches for its
    # names then, and each entry's device is compared too.
    monkeypatch.setattr(changes, "mounts_inside", lambda root: True)
    assert synced.changes() == []
    hidden_edit(synced.copy / "d0" / "f3.txt", "FILE 0.3\n")
    assert synced.changes() == [("d0/f3.txt", "modified")]


def test_mounts_inside_reads_the_mount_table(tmp_path: Path) -> None:
    assert change_record.mounts_inside(tmp_path) is False
    assert change_record.mounts_inside(Path("/")) is True


def test_a_source_file_written_just_before_the_sync_is_hashed(tmp_path: Path) -> None:
    # Its source stamp is too recent to vouch for it at apply time: the copy's bytes are
    # hashed right after the sync (the sync lists such files), and nothing else is.
    # "Just before" means within the sync's margin (20 ms) of its start; a loaded machine
    # (load 17-20, two CI runs) can put more than that between the write and the sync, and
    # then the file is rightly not recent. Such a round is done again, never judged.
    synced = Copy(tmp_path, walk=False)
    fresh = synced.source / "d1" / "f1.txt"
    for attempt in range(50):
        fresh.write_text(f"fresh {attempt}\n")
        _, again = sync_with_record(synced.source, synced.copy, record=synced.stamps)
        if fresh.stat().st_ctime_ns >= again.started_ns - again.granularity_ns:
            break
    else:
        pytest.fail("in 50 rounds the sync never started within its margin of the write")
    assert again.recent == [os.path.join("d1", "f1.txt")]
    record = change_record.finish(synced.copy, again, synced.source)
    assert list(record.hashes) == ["d1/f1.txt"]
    assert compute(record, synced.source, synced.copy) == []
