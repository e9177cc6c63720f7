"""A directory both sides made is merged entry by entry at a flow-in (issue 23), through the
Python API on real files. It was judged whole: the person's directory was one conflict, its
files were listed as the agent's deletions, and applying them would have deleted the person's
files the agent never saw."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.copy.bounds import Bounds


def workspace(tmp_path: Path) -> tuple[Path, Workspace]:
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "README").write_text("readme\n")
    return tree, Workspace(tmp_path / "state", tree, "w", Bounds())


def test_a_directory_both_made_is_merged_not_a_conflict(tmp_path: Path) -> None:
    tree, ws = workspace(tmp_path)
    with ws.command():
        (ws.tree / "d" / "deep").mkdir(parents=True)
        (ws.tree / "d" / "a").write_text("agent\n")
        (ws.tree / "d" / "same").write_text("same\n")
        (ws.tree / "d" / "both").write_text("agent's both\n")
        (ws.tree / "d" / "deep" / "x").write_text("agent x\n")
    (tree / "d" / "deep").mkdir(parents=True)
    (tree / "d" / "p").write_text("person\n")
    (tree / "d" / "same").write_text("same\n")
    (tree / "d" / "both").write_text("person's both\n")
    (tree / "d" / "deep" / "y").write_text("person y\n")
    again = Workspace(tmp_path / "state", tree, "w", Bounds())
    with again.command() as r:
        assert r.new_conflicts == ["d/both"], r.new_conflicts
        assert {"d/p", "d/deep/y"} <= set(r.flowed_in)
    # The agent's entries stay, the person's flowed in, the one both wrote differently is
    # the only conflict, with the person's version kept.
    assert (ws.tree / "d" / "a").read_text() == "agent\n"
    assert (ws.tree / "d" / "p").read_text() == "person\n"
    assert (ws.tree / "d" / "deep" / "x").read_text() == "agent x\n"
    assert (ws.tree / "d" / "deep" / "y").read_text() == "person y\n"
    assert (ws.tree / "d" / "both").read_text() == "agent's both\n"
    assert again.conflicts() == ["d/both"]
    changes = {e.path: e.kind for e in again.show().changes}
    assert "d/p" not in changes and "d/deep/y" not in changes, changes
    assert {"d/a", "d/deep/x", "d/both"} <= set(changes), changes
    # The person's tree is only read.
    assert (tree / "d" / "p").read_text() == "person\n"
    assert not (tree / "d" / "a").exists()


def test_differing_bits_of_a_directory_both_made_are_a_bits_conflict(tmp_path: Path) -> None:
    tree, ws = workspace(tmp_path)
    with ws.command():
        (ws.tree / "d").mkdir(mode=0o755)
        os.chmod(ws.tree / "d", 0o755)
        (ws.tree / "d" / "a").write_text("agent\n")
    (tree / "d").mkdir()
    os.chmod(tree / "d", 0o750)
    (tree / "d" / "p").write_text("person\n")
    again = Workspace(tmp_path / "state", tree, "w", Bounds())
    with again.command() as r:
        assert r.new_conflicts == ["d"]
    assert stat.S_IMODE((ws.tree / "d").stat().st_mode) == 0o755
    assert (ws.tree / "d" / "p").read_text() == "person\n"
    assert (ws.tree / "d" / "a").read_text() == "agent\n"
