"""The file bound refuses before copying when there is no kept copy to compare against
(issue 27 item 5: 100 001 files were copied, then deleted, before E_COPY_BOUND, 52-146 s by
arm; copy.bounds.count_files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.copy import fileops as copy_fileops
from sprawl_orch.copy.bounds import Bounds, Excludes, count_files
from sprawl_orch.copy.sync import sync
from sprawl_orch.core.errors import CopyBoundError


def tree(root: Path, files: int) -> Path:
    for i in range(files):
        d = root / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_text("x")
    return root


def test_a_first_sync_over_the_file_bound_copies_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tree(tmp_path / "src", 21)
    copied: list[str] = []
    real = copy_fileops.copy_opened

    def counting(
        sfd: int, sst: os.stat_result, path: str, *args: Any
    ) -> tuple[int, os.stat_result]:
        copied.append(path)  # every copy, by a copy worker (copy/pool.py) or not, comes here
        return real(sfd, sst, path, *args)

    monkeypatch.setattr(copy_fileops, "copy_opened", counting)
    with pytest.raises(CopyBoundError) as refused:
        sync(src, tmp_path / "copy", Bounds(files=20))
    assert (refused.value.bound, refused.value.limit, refused.value.reached) == ("files", 20, 21)
    assert "before anything was copied" in refused.value.detail
    assert copied == []
    assert not os.path.lexists(tmp_path / "copy")
    assert sync(src, tmp_path / "copy", Bounds(files=21)).created == 21


def test_the_count_is_a_floor_of_what_the_sync_counts(tmp_path: Path) -> None:
    """Links (kept, followed, refused or dangling) and excluded entries are not counted: a
    count over the bound must be a refusal the walk would reach too."""
    src = tree(tmp_path / "src", 5)
    (src / "ln").symlink_to("d0")
    (src / "dangling").symlink_to("nowhere")
    os.mkfifo(src / "fifo")
    (src / "skip").mkdir()
    (src / "skip" / "a").write_text("x")
    assert count_files(str(src), Excludes(), 100) == 6
    assert count_files(str(src), Excludes(("skip/",)), 100) == 5
    assert count_files(str(src), Excludes(), 2) == 3  # stops one past the limit
    # The walk counts 8 (6 files, the two links kept as links): the count (6) lets a bound
    # of 7 through and the walk refuses it as it copies, as before.
    with pytest.raises(CopyBoundError) as walked:
        sync(src, tmp_path / "copy", Bounds(files=7))
    assert "before anything was copied" not in walked.value.detail
    assert walked.value.reached == 8
    assert sync(src, tmp_path / "c2", Bounds(files=8)).created == 8
