"""The memory's safeguards outside the walk (design §5.1): the lease token every holder of a slot
leaves (copy/store.py), the writer note (copy/writers.py), the record version an older
sprawl-orch cannot load (copy/stamps.py MAGIC)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.copy import memory as copy_memory
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy import writers
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.store import CopyStore, copy_key
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.assurances import Assurances, Kept
from sprawl_orch.core.errors import SprawlError


@pytest.fixture
def store(tmp_path: Path) -> tuple[CopyStore, Path]:
    src = tmp_path / "work"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    return CopyStore(tmp_path / "state" / "copies", 1 << 30), src


def test_each_lease_leaves_a_token_the_next_one_finds(store: tuple[CopyStore, Path]) -> None:
    copies, src = store
    key = copy_key(src, "{}")
    first = copies.lease(src, key)
    first.sync(src, Bounds(), Excludes())  # a slot without a copy is removed at release
    assert first.found_token is None  # a new slot (or an older version's): nothing to trust
    assert len(first.token) == 32
    first.release()
    second = copies.lease(src, key)
    assert second.slot == first.slot
    assert second.found_token == first.token  # no holder came between
    assert second.token != first.token
    second.release()
    copies.info()  # `copies list` and eviction only look whether a slot is busy
    third = copies.lease(src, key)
    assert third.found_token == second.token
    third.release()
    # A lease that died before syncing (a killed resync): the next one finds its token.
    copies.lease(src, key).release()
    fourth = copies.lease(src, key)
    assert fourth.found_token not in (None, third.token)
    fourth.release()


def test_a_concurrent_lease_takes_another_slot_with_its_own_token(
    store: tuple[CopyStore, Path],
) -> None:
    copies, src = store
    key = copy_key(src, "{}")
    a = copies.lease(src, key)
    b = copies.lease(src, key)
    for held in (a, b):
        held.sync(src, Bounds(), Excludes())
    assert a.slot != b.slot and a.token != b.token
    a.release()
    b.release()


def test_the_writer_note_lasts_until_the_next_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    monkeypatch.setattr(writers, "_BOOT_ID", boot)
    state = tmp_path / "state"
    state.mkdir()
    confined = Assurances(
        filesystem=Kept.YES,
        network=Kept.YES,
        process_tree=Kept.YES,
        user=Kept.NO,
        resources=Kept.NO,
    )
    assert not writers.ran(state)
    writers.note_before(state, ArmName.LINUX_NAMESPACES, confined)  # the filesystem axis kept
    assert not writers.ran(state)
    writers.note_before(
        state, ArmName.LINUX_NAMESPACES, confined.model_copy(update={"filesystem": Kept.NO})
    )
    assert writers.ran(state)
    boot.write_text("boot-2\n")  # rebooted: every process of that command is gone
    assert not writers.ran(state)
    os.chmod(state / writers.NOTE, 0)
    if os.geteuid() != 0:  # root reads it anyway
        assert writers.ran(state)  # unreadable: as if noted


def test_a_landlock_command_is_noted_though_it_keeps_the_filesystem_axis(tmp_path: Path) -> None:
    """No namespace hides the state directory from it: as the sandbox uid it chmods and utimes
    another slot's copy by its path (tests/integration/test_copy_memory_landlock.py)."""
    state = tmp_path / "state"
    state.mkdir()
    every = Assurances(
        filesystem=Kept.YES,
        network=Kept.YES,
        process_tree=Kept.YES,
        user=Kept.NO,
        resources=Kept.NO,
    )
    for arm in (ArmName.CONTAINER, ArmName.LINUX_NAMESPACES, ArmName.PYTHON):
        writers.note_before(state, arm, every)
        assert not writers.ran(state), arm
    writers.note_before(state, ArmName.LANDLOCK, every)
    assert writers.ran(state)


def test_an_unwritable_note_refuses_the_command(tmp_path: Path) -> None:
    state = tmp_path / "state"  # missing: nothing can be written there
    reaching = Assurances(
        filesystem=Kept.NO, network=Kept.NO, process_tree=Kept.NO, user=Kept.NO, resources=Kept.NO
    )
    with pytest.raises(SprawlError, match="cannot note"):
        writers.note_before(state, ArmName.COPIED_TREE, reaching)


def test_an_older_versions_sync_voids_the_memory(
    store: tuple[CopyStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    copies, src = store
    lease = copies.lease(src, copy_key(src, "{}"))
    lease.sync(src, Bounds(), Excludes())
    rec = copy_stamps.load(lease.record_path)
    assert rec is not None
    _, snap = copy_memory.observe(lease.path, {}, 1 << 62)
    seen, _ = copy_memory.observe(lease.path, snap, 1 << 62)
    made = copy_memory.build(lease.token, os.lstat(lease.path), rec, lease.record_path.stat(), seen)
    token = lease.token
    lease.release()
    # An older sprawl-orch (record version 4, no token) syncs the slot between two calls.
    with monkeypatch.context() as old:
        old.setattr(copy_stamps, "MAGIC", b"SPRSTMP4")
        assert copy_stamps.load(lease.record_path) is None  # it can't load ours
        copy_stamps.save(copy_stamps.SyncRecord(str(src), 0, 0), lease.record_path)
    assert copy_stamps.load(lease.record_path) is None  # nor we its
    # It wrote no token, but its record is another inode: the memory is void.
    assert copy_memory.gate(made, token, lease.path, lease.record_path, False) is None


def test_threads_of_one_process_note_at_once(tmp_path: Path) -> None:
    """serve's workers are threads of one process: with one temporary name per pid, one
    thread's os.replace took away the file another was about to move (ENOENT), and a host
    command was refused E_STORAGE_FATAL (test_serve_load, the clean-clone CI)."""
    import threading

    from sprawl_orch.copy import writers

    failures: list[BaseException] = []
    for _ in range(40):
        (tmp_path / writers.NOTE).unlink(missing_ok=True)
        gate = threading.Barrier(6)

        def one(gate: threading.Barrier = gate) -> None:
            gate.wait()
            try:
                writers.note(tmp_path)
            except OSError as err:
                failures.append(err)

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:3]
    assert writers.ran(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [writers.NOTE]  # no temporary file left
