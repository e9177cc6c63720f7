"""A directory the person deleted or replaced, then made again (issue 23), through the Python
API on real files: the agent's start kept in bases/ makes the merge three-way -- the side
still equal to the start changed nothing there, the other side's version stands. Judged whole
or merged two-way, the person's new files were the agent's "deletions" or conflicts.
test_workspace_three_way.py holds the deletion itself."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.copy.bounds import Bounds
from tests.unit.test_workspace_three_way import again, changes, files, person_tree


def test_a_directory_the_person_makes_anew_is_merged_not_judged_whole(tmp_path: Path) -> None:
    """After the deletion, the person makes ``d`` again: their new files flow in and only
    the agent's change stays a conflict. Judged whole, ``d`` was one conflict, the person's
    new files were listed as the agent's deletions and ``apply d`` deleted them."""
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    shutil.rmtree(tree / "d")
    with again(tmp_path, tree).command():
        pass
    (tree / "d").mkdir()
    (tree / "d" / "b").write_text("person's new b\n")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/a"], r
        assert r.flowed_in == ["d/b"], r
    assert files(ws.tree / "d") == {"a": "agent a\n", "b": "person's new b\n"}
    assert changes(ws) == {"d/a": "created"}
    before = files(tree)
    for chosen in (None, ["d"], ["d/b"]):
        ws.apply(chosen)
        assert files(tree) == before, chosen


def test_a_directory_made_a_file_and_back_is_merged_three_way(tmp_path: Path) -> None:
    """The person makes ``d`` a file (a conflict on the whole of ``d``, the agent's start
    kept), then the directory again with d/b edited: d/b, which the agent left as it
    started, is the person's and flows in; d/a, which the person has as it started, is the
    agent's change, no conflict. Merged two-way, both were conflicts."""
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    kept = tmp_path / "kept"
    shutil.copytree(tree / "d", kept)
    shutil.rmtree(tree / "d")
    (tree / "d").write_text("a file now\n")
    with again(tmp_path, tree).command() as r:
        assert r.conflicts == ["d"], r
    (tree / "d").unlink()
    shutil.copytree(kept, tree / "d")
    (tree / "d" / "b").write_text("person's new b\n")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == [] and r.flowed_in == ["d/b"], r
    assert (ws.tree / "d" / "b").read_text() == "person's new b\n"
    assert (ws.tree / "d" / "a").read_text() == "agent a\n"
    assert changes(ws) == {"d/a": "modified"}


def test_a_directory_both_made_then_the_person_deleted(tmp_path: Path) -> None:
    """Merged when both made it (the person's d/p flowed in, d/both a conflict), then the
    person deletes ``d``: d/p goes with it, the agent's d/a and d/both stay conflicts."""
    tree = tmp_path / "proj"
    tree.mkdir()
    ws = Workspace(tmp_path / "state", tree, "w", Bounds())
    with ws.command():
        (ws.tree / "d").mkdir()
        (ws.tree / "d" / "a").write_text("agent a\n")
        (ws.tree / "d" / "both").write_text("agent both\n")
    (tree / "d").mkdir()
    (tree / "d" / "p").write_text("person p\n")
    (tree / "d" / "both").write_text("person both\n")
    with again(tmp_path, tree).command() as r:
        assert r.conflicts == ["d/both"] and r.flowed_in == ["d/p"], r
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/a", "d/both"], r
    assert sorted(os.listdir(ws.tree / "d")) == ["a", "both"]
    assert changes(ws) == {"d": "created", "d/a": "created", "d/both": "created"}


def test_a_start_goes_when_the_persons_edit_flows_in(tmp_path: Path) -> None:
    """After the merge above bases/d holds the whole old ``d``; the person edits d/c (the
    agent left it alone: it flows in), then deletes ``d``: d/c goes with it. The old start
    of d/c, older than the tree's, made it a conflict."""
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    kept = tmp_path / "kept"
    shutil.copytree(tree / "d", kept)
    shutil.rmtree(tree / "d")
    (tree / "d").write_text("a file now\n")
    with again(tmp_path, tree).command():
        pass
    (tree / "d").unlink()
    shutil.copytree(kept, tree / "d")
    with again(tmp_path, tree).command() as r:
        assert r.conflicts == [], r
    (tree / "d" / "c").write_text("person's new c\n")
    with again(tmp_path, tree).command() as r:
        assert r.flowed_in == ["d/c"], r
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/a"], r
    assert sorted(os.listdir(ws.tree / "d")) == ["a"]
    assert changes(ws) == {"d": "created", "d/a": "created"}
