"""Both copy sides (directory fds, and Windows' path fallback forced here) do the same work.

For random source trees -- files with different modes, links out of the tree, dangling
links -- and random things a command plants in the copy between syncs (links out of the copy,
fifos, directories in place of files, extra files), both give identical FileWork and identical
copies, equal to the source seen through its links, and nothing outside the copy is written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sprawl_orch.copy import sync as copy_sync
from sprawl_orch.copy.fileops import FdCopy
from sprawl_orch.copy.paths import PathCopy
from sprawl_orch.copy.sync import CopySide, FileWork, dir_fds_work, sync
from tests.unit.test_copy_sync import snapshot, view

names = st.sampled_from(["a", "b", "c"])
leaves = st.one_of(
    st.binary(max_size=6),  # a 0644 file
    st.tuples(st.just("exec"), st.binary(max_size=6)),  # a 0755 file
    st.tuples(st.just("link"), st.sampled_from(["o", "od", "missing"])),  # a link outside
)
trees = st.recursive(leaves, lambda c: st.dictionaries(names, c, max_size=3), max_leaves=10)
roots = st.dictionaries(names, trees, max_size=3)
plants = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "a/a", "a/b", "b/a", "c/c/c"]),
        st.sampled_from(["link-file", "link-dir", "fifo", "dir", "file"]),
    ),
    max_size=3,
)


def write(root: Path, tree: dict[str, Any], outside: Path) -> None:
    root.mkdir()
    for name, item in tree.items():
        path = root / name
        if isinstance(item, bytes):
            path.write_bytes(item)
            path.chmod(0o644)
        elif isinstance(item, dict):
            write(path, item, outside)
        elif item[0] == "exec":
            path.write_bytes(item[1])
            path.chmod(0o755)
        else:
            path.symlink_to(outside / item[1])


def plant(copy: Path, where: str, what: str, outside: Path) -> None:
    """What a command may leave in the copy; nothing if the parent isn't a real directory."""
    path = copy / where
    if path.parent.is_symlink() or not path.parent.is_dir():
        return
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if what == "link-file":
        path.symlink_to(outside / "o")
    elif what == "link-dir":
        path.symlink_to(outside / "od")
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "dir":
        path.mkdir()
        (path / "inner").write_bytes(b"planted")
    else:
        path.write_bytes(b"planted")


@contextmanager
def using(side: CopySide[Any]) -> Iterator[None]:
    saved = copy_sync.COPY_SIDE
    copy_sync.COPY_SIDE = side
    try:
        yield
    finally:
        copy_sync.COPY_SIDE = saved


def sync_with(side: CopySide[Any], src: Path, copy: Path) -> FileWork:
    with using(side):
        return sync(src, copy)


@pytest.mark.skipif(not dir_fds_work(), reason="compares with the dir-fd side, which needs them")
def untimed(seen: dict[str, Any]) -> dict[str, Any]:
    """The view without its mtimes (the last field of file, directory and link entries)."""
    return {k: v[:-1] if v[0] in ("file", "dir", "link") else v for k, v in seen.items()}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=roots, second=roots, planted=plants)
def test_both_sides_give_identical_work_and_trees(
    first: dict[str, Any], second: dict[str, Any], planted: list[tuple[str, str]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        outside = base / "outside"
        (outside / "od").mkdir(parents=True)
        (outside / "o").write_bytes(b"outside")
        (outside / "od" / "x").write_bytes(b"outside dir")
        before = snapshot(outside)
        src, by_fd, by_path = base / "src", base / "fd", base / "path"
        write(src, first, outside)
        fd_side, path_side = FdCopy(), PathCopy()
        assert sync_with(fd_side, src, by_fd) == sync_with(path_side, src, by_path)
        assert view(by_fd, follow=False) == view(by_path, follow=False) == view(src, follow=True)
        for where, what in planted:
            plant(by_fd, where, what, outside)
            plant(by_path, where, what, outside)
        # What a command planted has its own times on each side: compare all but those.
        assert untimed(view(by_fd, follow=False)) == untimed(view(by_path, follow=False))
        shutil.rmtree(src)
        write(src, second, outside)
        assert sync_with(fd_side, src, by_fd) == sync_with(path_side, src, by_path)
        assert view(by_fd, follow=False) == view(by_path, follow=False) == view(src, follow=True)
        assert snapshot(outside) == before
