"""Workspaces keep everything through a failed command (issue 23's rule: nothing of the agent's
work, nor the person's tree, is lost by a refused or failed command), on real files through
the Python API: a base sync that fails midway is undone; a directory-bits conflict keeps the
person's bits under theirs/; `take` on it takes only the directory's own bits."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.changes.workspace_state import FLOWING, THEIRS, UNDO
from sprawl_orch.copy.bounds import Bounds
from sprawl_orch.core.errors import ErrorCode, SprawlError

BOUND = 200_000


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "proj"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "more.py").write_text("def one():\n    return 1\n")
    (tree / "pkg" / "keep.py").write_text("keep\n")
    (tree / "docs").mkdir()
    (tree / "docs" / "a.md").write_text("a\n")
    (tree / "old").mkdir()
    (tree / "old" / "x").write_text("x\n")
    (tree / "README").write_text("readme\n")
    return tree, tmp_path / "state"


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``root``: kind, permission bits, bytes or link target (no times)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for here, dirs, names in os.walk(root):
        for name in dirs + names:
            p = Path(here) / name
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(p).encode())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out


def person_edits_then_over_the_bound(tree: Path) -> None:
    """Edits of every kind the sync writes (a file the agent changed too, one it did not, a
    directory's bits, a directory removed, a new one), and two files of 0.6x the bound each:
    whichever the sync meets second is over it, so it fails midway in any walk order."""
    (tree / "pkg" / "more.py").write_text("person\n")
    (tree / "README").write_text("person readme\n")
    os.chmod(tree / "docs", 0o750)
    (tree / "old" / "x").unlink()
    (tree / "old").rmdir()
    (tree / "fresh").mkdir()
    (tree / "fresh" / "y").write_text("y\n")
    (tree / "big1").write_bytes(b"1" * int(BOUND * 0.6))
    (tree / "fresh" / "big2").write_bytes(b"2" * int(BOUND * 0.6))


def test_a_failed_base_sync_leaves_the_workspace_as_it_was(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w", Bounds(bytes=BOUND))
    with ws.command():
        (ws.tree / "pkg" / "more.py").write_text("agent\n")
        (ws.tree / "agent.txt").write_text("agent's own\n")
        (ws.tree / "old" / "x").write_text("agent x\n")  # the person removes its directory
    trees = snapshot(ws.tree), snapshot(ws.base)
    person_edits_then_over_the_bound(tree)
    person = snapshot(tree)
    with (
        pytest.raises(SprawlError) as refused,
        Workspace(state, tree, "w", Bounds(bytes=BOUND)).command(),
    ):
        pytest.fail("no command runs after a failed flow-in")
    assert refused.value.code is ErrorCode.COPY_BOUND
    assert "kept as it was before this command" in refused.value.detail
    assert (snapshot(ws.tree), snapshot(ws.base)) == trees
    assert snapshot(tree) == person  # the person's tree is only read
    assert not (ws.dir / FLOWING).exists() and not (ws.dir / UNDO).exists()
    again = Workspace(state, tree, "w", Bounds(bytes=BOUND))  # as a next CLI call would
    assert again.exists() and again.conflicts() == []
    assert [e.path for e in again.show().changes] == ["agent.txt", "old/x", "pkg/more.py"]
    # The cause gone, the next command lets every edit in, the conflicts named as ever.
    (tree / "big1").unlink()
    with Workspace(state, tree, "w", Bounds(bytes=BOUND)).command() as r:
        # old/x, not old: the person deleted the directory, the agent changed that file in
        # it (test_workspace_three_way.py)
        assert sorted(r.new_conflicts) == ["old/x", "pkg/more.py"]
        assert {"README", "docs", "fresh"} <= set(r.flowed_in)
    assert (ws.tree / "pkg" / "more.py").read_text() == "agent\n"
    assert (ws.tree / "agent.txt").read_text() == "agent's own\n"
    assert (ws.tree / "README").read_text() == "person readme\n"
    assert (ws.tree / "fresh" / "big2").stat().st_size == int(BOUND * 0.6)
    assert stat.S_IMODE((ws.tree / "docs").stat().st_mode) == 0o750
    assert (ws.dir / THEIRS / "pkg" / "more.py").read_text() == "person\n"


def test_a_failed_first_sync_makes_no_workspace(project: tuple[Path, Path]) -> None:
    """Nothing of the agent's is there yet: the half-made workspace is not kept, and the
    next command (within the bound) makes it whole."""
    tree, state = project
    (tree / "big1").write_bytes(b"1" * int(BOUND * 0.6))
    (tree / "big2").write_bytes(b"2" * int(BOUND * 0.6))
    ws = Workspace(state, tree, "w", Bounds(bytes=BOUND))
    with pytest.raises(SprawlError) as refused, ws.command():
        pytest.fail("no command runs after a failed first sync")
    assert refused.value.code is ErrorCode.COPY_BOUND and not ws.exists()
    (tree / "big2").unlink()
    with ws.command() as r:
        assert r.created
    assert (ws.tree / "big1").stat().st_size == int(BOUND * 0.6)
    assert json.loads((ws.dir / "meta.json").read_text())["conflicts"] == []


def bits(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_conflict_on_a_directorys_bits_keeps_the_persons_and_take_takes_only_them(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        os.chmod(ws.tree / "pkg", 0o705)
        (ws.tree / "pkg" / "more.py").write_text("agent\n")
        (ws.tree / "pkg" / "agent.py").write_text("agent's new\n")
    os.chmod(tree / "pkg", 0o750)
    (tree / "pkg" / "keep.py").write_text("person keep\n")  # flows in under it
    with ws.command() as r:
        assert r.new_conflicts == ["pkg"] and r.flowed_in == ["pkg/keep.py"]
    # The person's version is kept and named like any other conflict's.
    view = ws.show()
    assert view.conflicts == {"pkg": str(ws.dir / THEIRS / "pkg")}
    assert bits(ws.dir / THEIRS / "pkg") == 0o750
    # Only the directory's own entry is held back by apply: the agent's files under it are
    # not the conflict's.
    held = ws.apply(dry_run=True)
    assert [i.path for i in held.refused if i.change == "conflict"] == ["pkg"]
    assert {i.path for i in held.applied} == {"pkg/more.py", "pkg/agent.py"}
    ws.take("pkg")
    assert bits(ws.tree / "pkg") == 0o750
    assert (ws.tree / "pkg" / "more.py").read_text() == "agent\n"
    assert (ws.tree / "pkg" / "agent.py").read_text() == "agent's new\n"
    assert (ws.tree / "pkg" / "keep.py").read_text() == "person keep\n"
    assert ws.conflicts() == [] and not (ws.dir / THEIRS / "pkg").exists()
    assert sorted(e.path for e in ws.show().changes) == ["pkg/agent.py", "pkg/more.py"]
    with ws.command() as r:  # taken: no conflict comes back
        assert r.conflicts == [] and r.new_conflicts == []


def test_take_of_a_directorys_bits_keeps_the_conflicts_under_it(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        os.chmod(ws.tree / "pkg", 0o705)
        (ws.tree / "pkg" / "more.py").write_text("agent\n")
    os.chmod(tree / "pkg", 0o750)
    (tree / "pkg" / "more.py").write_text("person\n")
    with ws.command() as r:
        assert sorted(r.new_conflicts) == ["pkg", "pkg/more.py"]
    assert (ws.dir / THEIRS / "pkg" / "more.py").read_text() == "person\n"
    assert bits(ws.dir / THEIRS / "pkg") == 0o750
    ws.take("pkg")
    assert ws.conflicts() == ["pkg/more.py"]
    assert (ws.tree / "pkg" / "more.py").read_text() == "agent\n"
    assert (ws.dir / THEIRS / "pkg" / "more.py").read_text() == "person\n"
    ws.take("pkg/more.py")
    assert (ws.tree / "pkg" / "more.py").read_text() == "person\n" and ws.conflicts() == []
