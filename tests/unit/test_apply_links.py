"""Which links `apply` may write (apply_check.link_stays_inside): a link must resolve inside
the tree now, with the links the same apply writes followed too, and must never climb with
`..` after a name -- `Y/../x` leads out as soon as `Y` becomes a link to `.` (the escape
suite's apply-link-through-* probes)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.changes.apply_check import link_stays_inside, up_after_name


@pytest.fixture
def root_fd(tmp_path: Path) -> Iterator[int]:
    tree = tmp_path / "tree"
    (tree / "sub" / "deep").mkdir(parents=True)
    (tree / "up").symlink_to("..")  # the person's own link out of the tree
    (tree / "f.txt").write_text("f\n")
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.mark.parametrize(
    "target,climbs",
    [
        ("a", False),
        ("../a", False),
        ("../../a/b", False),
        ("./a/./b", False),
        ("Y/../x", True),
        ("a/b/..", True),
        ("../a/../b", True),
        (".", False),
    ],
)
def test_up_after_name(target: str, climbs: bool) -> None:
    assert up_after_name(target) is climbs


def test_plain_links_inside_and_out(root_fd: int) -> None:
    assert link_stays_inside(root_fd, "sub/deep/l", "../../f.txt")
    assert not link_stays_inside(root_fd, "sub/deep/l", "../../../x")
    assert not link_stays_inside(root_fd, "l", "/etc/passwd")
    assert not link_stays_inside(root_fd, "l", "up/x")  # through the tree's own link out


def test_a_name_that_may_become_a_link_is_never_climbed_out_of(root_fd: int) -> None:
    # Y is absent (or a directory) now; the same apply, a later one or the person can make it
    # a link to `.`, and then Y/../x is the tree's parent.
    assert not link_stays_inside(root_fd, "X", "Y/../x")
    assert not link_stays_inside(root_fd, "X", "sub/../x")


def test_links_the_same_apply_writes_are_followed(root_fd: int) -> None:
    assert not link_stays_inside(root_fd, "X", "Y/x", {"Y": ".."})
    assert link_stays_inside(root_fd, "X", "Y/f.txt", {"Y": "sub/deep/.."})
    assert link_stays_inside(root_fd, "X", "Y/x", {"Y": "sub/deep"})
    # a link of the tree the apply turns into a directory is no longer followed
    assert link_stays_inside(root_fd, "X", "up/x/y", {"up": None})


@pytest.mark.parametrize(
    "rel,target",
    [
        ("Y", "."),
        ("sub/up", ".."),
        ("sub/deep/l", "../.."),
        ("sub/self", "../sub"),
        ("sub/deep/l", "."),
    ],
)
def test_a_link_to_its_own_directory_or_above_is_refused(
    root_fd: int, rel: str, target: str
) -> None:
    # the person's `p -> Y/../x` (or any `Y/..`) would climb out once Y points up
    assert not link_stays_inside(root_fd, rel, target)


def test_links_down_and_across_stay_allowed(root_fd: int) -> None:
    assert link_stays_inside(root_fd, "l", "sub/deep")
    assert link_stays_inside(root_fd, "sub/deep/l", "../../f.txt")  # a file: no `..` through it
    assert link_stays_inside(root_fd, "sub/l", "deep")
    assert link_stays_inside(root_fd, "sub/l", "deep/new")  # deeper, not there yet
