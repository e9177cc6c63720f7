"""core/removal.py, the one tree removal (issue 28): no link followed, any depth, both walks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sprawl_orch.core import removal
from sprawl_orch.core.removal import delete_path, delete_quietly, remove_tree, remove_tree_by_path


def _fd_walk(path: Path) -> int:
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return remove_tree(path.name, parent)
    finally:
        os.close(parent)


def _path_walk(path: Path) -> int:
    return remove_tree_by_path(str(path))


WALKS: dict[str, Callable[[Path], int]] = {"dir_fd": _fd_walk, "path": _path_walk}


def _hostile_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A tree holding links out of it (to a directory and a file) and a fifo, and the outside
    those links point at."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the person's")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    (tree / "to-dir").symlink_to(outside)
    (tree / "a" / "to-file").symlink_to(outside / "keep.txt")
    os.mkfifo(tree / "a" / "fifo")
    return tree, outside


@pytest.mark.parametrize("walk", WALKS)
def test_a_tree_goes_and_nothing_a_link_points_at(walk: str, tmp_path: Path) -> None:
    tree, outside = _hostile_tree(tmp_path)
    assert WALKS[walk](tree) == 4  # f, two links, the fifo
    assert not tree.exists()
    assert (outside / "keep.txt").read_text() == "the person's"


@pytest.mark.parametrize("walk", WALKS)
def test_a_tree_deeper_than_the_recursion_limit(walk: str, tmp_path: Path) -> None:
    # shutil.rmtree in 3.11 takes a stack frame (and an fd) per level: the warm reset met a
    # 1500-deep /tmp (issue 30). Made by fd, as a command would, past PATH_MAX.
    tree = tmp_path / "deep"
    tree.mkdir()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    os.close(fd)
    assert WALKS[walk](tree) == 1
    assert not tree.exists()


def test_delete_path_removes_a_link_itself_not_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "f").write_text("kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    delete_path(link)
    assert not link.is_symlink() and (target / "f").read_text() == "kept"


def test_delete_path_takes_files_trees_and_what_is_gone(tmp_path: Path) -> None:
    tree, outside = _hostile_tree(tmp_path)
    delete_path(tree)
    assert not tree.exists() and (outside / "keep.txt").exists()
    (tmp_path / "file").write_text("x")
    delete_path(str(tmp_path / "file"))
    assert not (tmp_path / "file").exists()
    delete_path(tmp_path / "never-was")  # no error
    delete_path(tmp_path / "no-parent" / "x")  # no error either


def test_delete_path_without_dir_fds_behaves_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(removal, "DIR_FDS", False)
    tree, outside = _hostile_tree(tmp_path)
    delete_path(tree)
    assert not tree.exists() and (outside / "keep.txt").read_text() == "the person's"
    delete_path(tmp_path / "never-was")


def test_delete_quietly_says_nothing_where_delete_path_says_why(tmp_path: Path) -> None:
    # A failure root meets too: the parent is a file, not a directory.
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        delete_path(tmp_path / "file" / "x")
    delete_quietly(tmp_path / "file" / "x")  # the clean-up callers' rmtree(ignore_errors=True)
    assert (tmp_path / "file").read_text() == "x"


def test_the_one_open_beneath_follows_no_link_and_waits_on_no_fifo(tmp_path: Path) -> None:
    from sprawl_orch.core.beneath import open_dir, open_file

    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    os.mkfifo(tmp_path / "fifo")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.close(open_dir("dir", parent))
        os.close(open_file("file", parent))
        os.close(open_file(tmp_path / "fifo"))  # no writer, and still no wait
        for name, opener in (("to-dir", open_dir), ("to-file", open_file)):
            with pytest.raises(OSError):  # ELOOP (or ENOTDIR): the link is never followed
                os.close(opener(name, parent))
    finally:
        os.close(parent)
