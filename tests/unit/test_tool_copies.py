"""An exec tool's copy slots (tool_copies.py): leased and synced per command, released after,
never failing a command over an eviction, never keeping a slot a refused sync left."""

from __future__ import annotations

from pathlib import Path

import pytest

from sprawl_orch.copy.store import CopyInfo
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.tool.copies import ToolCopies
from tests.unit.conftest import make_config


def test_a_lease_is_synced_and_its_release_frees_the_slot(tmp_path: Path, tree: Path) -> None:
    copies = ToolCopies(make_config(tmp_path), tree, tmp_path / "state")
    lease, work = copies.lease()
    assert (lease.path / "README").read_text() == "readme\n"
    assert work.created == 2
    assert [info.busy for info in copies.store.info()] == [True]
    copies.release(lease)
    assert [info.busy for info in copies.store.info()] == [False]
    again, work = copies.lease()  # the next command: the same slot, resynced, nothing new
    assert again.slot == lease.slot and work.created == 0
    copies.release(again)
    assert copies.problem is None


def test_an_eviction_failure_is_kept_not_raised(
    tmp_path: Path, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies = ToolCopies(make_config(tmp_path), tree, tmp_path / "state")
    lease, _ = copies.lease()

    def refuse(keep: Path | None = None) -> list[CopyInfo]:
        raise PermissionError(13, "Permission denied", str(lease.slot))

    monkeypatch.setattr(copies.store, "evict", refuse)
    copies.release(lease)  # a copy that cannot be deleted never fails the command
    assert copies.problem is not None and "evicting copies failed" in copies.problem
    assert "Permission denied" in copies.problem
    assert [info.busy for info in copies.store.info()] == [False]


def test_a_refused_sync_leaves_no_busy_slot(tmp_path: Path, tree: Path) -> None:
    config = make_config(tmp_path, copy={"max_files": 1})
    copies = ToolCopies(config, tree, tmp_path / "state")
    with pytest.raises(SprawlError) as refused:
        copies.lease()
    assert refused.value.code == ErrorCode.COPY_BOUND and "max_files = 1" in refused.value.detail
    assert all(not info.busy for info in copies.store.info())


def test_a_refused_sync_leaves_no_bookkeeping(tmp_path: Path, tree: Path) -> None:
    # Issue 27: the slot's lock and meta.json stayed, and `copies list` showed a 0 B copy.
    state = tmp_path / "state"
    kept = ToolCopies(make_config(tmp_path), tree, state)
    lease, _ = kept.lease()
    kept.release(lease)
    assert len(kept.store.info()) == 1
    config = make_config(tmp_path, copy={"max_files": 1})
    copies = ToolCopies(config, tree, state)
    with pytest.raises(SprawlError):
        copies.lease()
    assert copies.store.info() == kept.store.info()  # the other key's copy is untouched
    assert sorted(p.name for p in copies.store.root.iterdir()) == [lease.slot.parent.name]
    empty = copies.store.lease(tree, "k")  # a lease released without a copy: nothing stays
    empty.release()
    assert not (copies.store.root / "k").exists()
