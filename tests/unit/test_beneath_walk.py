"""The one dir-fd walker (core/beneath.py walk_down: the tree removal and the warm reset's
listing both stand on it) and the one directory chmod that follows no link (chmod_dir)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sprawl_orch.core.beneath import Moved, chmod_dir, open_dir, walk_down
from sprawl_orch.core.removal import delete_path


def _seen(top: Path, **kw: object) -> list[str]:
    seen: list[str] = []

    def enter(fd: int, rel: str) -> list[str]:
        seen.append(rel)
        with os.scandir(fd) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))

    walk_down(open_dir(str(top)), enter, **kw)  # type: ignore[arg-type]
    return sorted(seen)


def test_every_directory_once_with_its_path_and_no_link_entered(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "a" / "file").write_text("x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "inner").mkdir()
    (tmp_path / "a" / "out").symlink_to(outside)
    assert _seen(tmp_path) == ["", "a", "a/b", "c"]


def test_a_tree_deeper_than_the_recursion_limit_costs_one_fd(tmp_path: Path) -> None:
    here = tmp_path
    for _ in range(1200):  # past Python's default recursion limit (1000)
        here = here / "d"
        here.mkdir()
    fds_before = len(os.listdir("/proc/self/fd"))
    most = 0

    def enter(fd: int, rel: str) -> list[str]:
        nonlocal most
        most = max(most, len(os.listdir("/proc/self/fd")) - fds_before)
        return ["d"] if rel.count("d") < 1200 else []

    walk_down(open_dir(str(tmp_path)), enter)
    assert most <= 2  # the walk's one fd, and listdir's own while it reads
    assert len(os.listdir("/proc/self/fd")) == fds_before
    delete_path(tmp_path / "d")  # pytest's own clean-up (shutil.rmtree) recurses too deep


def test_a_directory_gone_since_it_was_listed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()

    def enter(fd: int, rel: str) -> list[str]:
        if rel == "":
            os.rmdir(tmp_path / "a")
            return ["a"]
        return []

    with pytest.raises(FileNotFoundError):
        walk_down(open_dir(str(tmp_path)), enter)
    (tmp_path / "a").mkdir()
    walk_down(open_dir(str(tmp_path)), enter, vanished_ok=True)  # passed over


def test_a_directory_moved_under_the_walk_raises(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    left: list[str] = []

    def enter(fd: int, rel: str) -> list[str]:
        if rel == "a/b":
            os.rename(tmp_path / "a" / "b", tmp_path / "c" / "b")  # ".." is now c, not a
        return {"": ["a"], "a": ["b"]}.get(rel, [])

    with pytest.raises(Moved):
        walk_down(open_dir(str(tmp_path)), enter, left=lambda fd, name: left.append(name))
    assert left == []  # nothing done from a parent the walk did not come from


def test_chmod_dir_does_not_follow_a_link_in_the_directory_place(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError):
        chmod_dir(tmp_path / "link", 0o777)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    chmod_dir(target, 0o750)
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
