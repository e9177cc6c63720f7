"""Persistent copies (copy_store): slots, locks, a killed holder, the disk budget, drop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.store import CopyStore, copy_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_bytes(b"x = 1\n" * 100)
    (root / "README").write_bytes(b"hello\n")
    return root


def test_one_holder_per_slot_a_concurrent_lease_takes_another(tmp_path: Path, src: Path) -> None:
    store = CopyStore(tmp_path / "copies", budget_bytes=10**9)
    key = copy_key(src, "{}")
    first = store.lease(src, key)
    second = store.lease(src, key)
    assert first.slot != second.slot and first.slot.parent == second.slot.parent
    assert first.sync(src, Bounds(), Excludes()).created == 2
    first.release()
    third = store.lease(src, key)
    assert third.slot == first.slot
    # The copy outlived its lease: a resync, not a rebuild.
    assert third.sync(src, Bounds(), Excludes()).created == 0
    assert [i.busy for i in store.info()] == [True, True]
    second.release()
    third.release()
    third.release()  # idempotent
    # `second` never synced: released without a copy, it leaves nothing (issue 27).
    assert [(i.slot, i.busy) for i in store.info()] == [(third.slot, False)]


def test_a_different_workdir_or_config_gets_its_own_copy(tmp_path: Path, src: Path) -> None:
    assert copy_key(src, "{}") != copy_key(src, '{"arm": "native"}')
    assert copy_key(src, "{}") != copy_key(tmp_path, "{}")
    link = tmp_path / "via-link"
    link.symlink_to(src)
    assert copy_key(link, "{}") == copy_key(src, "{}")  # its real path


def test_a_killed_holder_leaves_a_copy_the_next_call_resyncs(tmp_path: Path, src: Path) -> None:
    store_root = tmp_path / "copies"
    key = copy_key(src, "{}")
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from sprawl_orch.copy.store import CopyStore\n"
        "from sprawl_orch.copy.bounds import Bounds, Excludes\n"
        f"lease = CopyStore(Path({str(store_root)!r}), 10**9).lease(Path({str(src)!r}), {key!r})\n"
        f"lease.sync(Path({str(src)!r}), Bounds(), Excludes())\n"
        "(lease.path / 'README').write_bytes(b'a command wrote this')\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
    store = CopyStore(store_root, 10**9)
    assert [i.busy for i in store.info()] == [True]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lease = store.lease(src, key)
    assert lease.slot.name == "0"  # the kernel released the dead holder's lock
    work = lease.sync(src, Bounds(), Excludes())
    assert (work.created, work.rewritten, work.removed) == (0, 1, 0)
    assert (lease.path / "README").read_bytes() == b"hello\n"
    lease.release()


def test_budget_evicts_idle_copies_oldest_first(tmp_path: Path) -> None:
    store = CopyStore(tmp_path / "copies", budget_bytes=2500)
    leases = []
    for n in range(3):
        work = tmp_path / f"w{n}"
        work.mkdir()
        (work / "data").write_bytes(b"x" * 1000)
        lease = store.lease(work, copy_key(work, "{}"))
        lease.sync(work, Bounds(), Excludes())
        leases.append(lease)
    held = leases[1]
    leases[0].release()
    time.sleep(0.01)
    leases[2].release()
    # 3000 bytes > 2500: the oldest idle copy goes; the held one and the one just released stay.
    dropped = store.evict(keep=leases[2].slot)
    assert [d.slot for d in dropped] == [leases[0].slot]
    assert not leases[0].slot.exists() and held.slot.exists() and leases[2].slot.exists()
    assert store.drop(held.slot) is False  # held: never dropped
    held.release()
    assert store.drop(held.slot) is True and not held.slot.exists()


def test_a_refused_sync_deletes_the_copy_and_its_record(tmp_path: Path, src: Path) -> None:
    store = CopyStore(tmp_path / "copies", budget_bytes=10**9)
    lease = store.lease(src, copy_key(src, "{}"))
    lease.sync(src, Bounds(), Excludes())
    assert lease.record_path.exists()
    with pytest.raises(Exception, match="max_files = 1"):
        lease.sync(src, Bounds(files=1), Excludes())
    assert not lease.path.exists() and not lease.record_path.exists()
    lease.release()


def test_an_unchanged_resync_leaves_the_slot_meta_to_the_release(tmp_path: Path, src: Path) -> None:
    """The bookkeeping is written once a call for an unchanged tree (by release), and again
    after a sync whenever the size on file is no longer the copy's."""
    store = CopyStore(tmp_path / "copies", budget_bytes=10**9)
    key = copy_key(src, "{}")
    lease = store.lease(src, key)
    lease.sync(src, Bounds(), Excludes())
    lease.release()
    meta = lease.slot / "meta.json"
    before = meta.stat().st_ino
    lease = store.lease(src, key)
    lease.sync(src, Bounds(), Excludes())
    assert meta.stat().st_ino == before  # not rewritten (a write makes a new inode: rename)
    lease.release()
    assert meta.stat().st_ino != before
    (src / "README").write_bytes(b"hello, longer now\n")
    lease = store.lease(src, key)
    lease.sync(src, Bounds(), Excludes())
    assert [i.bytes for i in store.info()] == [len(b"x = 1\n" * 100) + 18]
    lease.release()
