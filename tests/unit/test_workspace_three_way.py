"""The person deletes a directory in which the agent changed something (issue 23), through the
Python API on real files. The flow-in judged the directory whole: a conflict on ``d``, every
entry of the agent's ``d`` listed as created by the agent -- the person's deleted files among
them -- and ``apply d/b`` brought the person's deleted file back. The merge is three-way
against the agent's start (``bases/``): an entry equal to it is the person's deletion, one the
agent changed or added is the agent's and a conflict with that deletion. Its neighbours too:
a deleted file the agent changed, a file or directory it left alone, a directory where it only
added a file, and the same after a real SIGKILL mid-flow."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.changes.workspace_state import BASES
from sprawl_orch.copy.bounds import Bounds


def files(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (a directory as "/"), to see that nothing changed."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = "/" if p.is_dir() else p.read_text()
    return out


def person_tree(tmp_path: Path) -> tuple[Path, Workspace]:
    tree = tmp_path / "proj"
    (tree / "d" / "sub").mkdir(parents=True)
    (tree / "README").write_text("readme\n")
    for name in "abc":
        (tree / "d" / name).write_text(f"person {name}\n")
    (tree / "d" / "sub" / "x").write_text("person x\n")
    return tree, Workspace(tmp_path / "state", tree, "w", Bounds())


def again(tmp_path: Path, tree: Path) -> Workspace:
    return Workspace(tmp_path / "state", tree, "w", Bounds())


def changes(ws: Workspace) -> dict[str, str]:
    return {e.path: e.change for e in ws.show().changes}


def test_a_deleted_directory_keeps_only_the_agents_change_as_a_conflict(tmp_path: Path) -> None:
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.new_conflicts == ["d/a"], r
        assert r.conflicts == ["d/a"], r
        assert r.flowed_in == ["d/b", "d/c", "d/sub"], r  # the person's deletion, named once
    # The person's deleted files are gone from the workspace too, not listed as the agent's.
    assert sorted(os.listdir(ws.tree / "d")) == ["a"]
    assert (ws.tree / "d" / "a").read_text() == "agent a\n"
    assert changes(ws) == {"d": "created", "d/a": "created"}
    # Nothing brings the person's deleted files back; refused commands change nothing.
    before = files(tree)
    for chosen in (None, ["d"], ["d/b"], ["d/sub"], ["d/sub/x"]):
        result = ws.apply(chosen)
        assert result.applied == [], (chosen, result)
        assert files(tree) == before, chosen
    # The plain apply holds the conflict back, named with the agent's actual change; the
    # directory is held as what holds it.
    refused = {i.path: i.why or "" for i in ws.apply(dry_run=True).refused}
    assert sorted(refused) == ["d", "d/a"], refused
    assert "holds the conflicts d/a" in refused["d"], refused
    # Chosen by name, only the agent's change comes in (its directory with it).
    applied = ws.apply(["d/a"])
    assert [i.path for i in applied.applied] == ["d", "d/a"], applied
    assert files(tree) == {**before, "d": "/", "d/a": "agent a\n"}


def test_the_deleted_entries_starts_are_forgotten(tmp_path: Path) -> None:
    """bases/ keeps the agent's start of the conflict only: the person's deleted files' starts
    do not come back at the next flow, and nothing of them reappears."""
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command():
        pass
    bases = ws.dir / BASES
    assert files(bases / "d") == {"a": "person a\n"}
    (tree / "other").write_text("person\n")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.flowed_in == ["other"], r
        assert r.conflicts == ["d/a"], r
    assert sorted(os.listdir(ws.tree / "d")) == ["a"]
    assert changes(ws) == {"d": "created", "d/a": "created"}


def test_taking_the_persons_deletion_leaves_no_empty_directory(tmp_path: Path) -> None:
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "sub" / "x").write_text("agent x\n")
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/sub/x"], r
    assert changes(ws) == {"d": "created", "d/sub": "created", "d/sub/x": "created"}
    ws.take("d/sub/x")
    assert ws.conflicts() == []
    assert not os.path.lexists(ws.tree / "d")
    assert changes(ws) == {}
    before = files(tree)
    ws.apply()
    assert files(tree) == before


def test_a_link_or_changed_bits_in_a_deleted_directory_is_the_agents(tmp_path: Path) -> None:
    """A directory the agent made a link to elsewhere, or one whose bits it changed (here to
    000: unreadable), is the agent's change, a conflict whole: never walked through, never
    listed; the person's files beside them still go."""
    tree, ws = person_tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("keep\n")
    with ws.command():
        (ws.tree / "d" / "locked").mkdir()
        (ws.tree / "d" / "locked" / "f").write_text("agent\n")
        shutil.rmtree(ws.tree / "d" / "sub")
        (ws.tree / "d" / "sub").symlink_to(elsewhere)
    (tree / "d" / "locked").mkdir()
    (tree / "d" / "locked" / "f").write_text("agent\n")
    with again(tmp_path, tree).command():
        pass
    os.chmod(ws.tree / "d" / "locked", 0)
    try:
        shutil.rmtree(tree / "d")
        ws = again(tmp_path, tree)
        with ws.command() as r:
            assert r.conflicts == ["d/locked", "d/sub"], r
        assert sorted(os.listdir(ws.tree / "d")) == ["locked", "sub"]
        assert files(elsewhere) == {"keep": "keep\n"}
    finally:
        os.chmod(ws.tree / "d" / "locked", 0o700)


def test_a_conflict_the_agent_undid_takes_its_emptied_directory_along(tmp_path: Path) -> None:
    """The agent removes its own change later: the conflict is over at the next flow, and
    the directory the person deleted, empty now, goes too (left, `changes` listed it as made
    by the agent and a plain apply brought it back)."""
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    shutil.rmtree(tree / "d")
    with again(tmp_path, tree).command():
        pass
    with again(tmp_path, tree).command():
        (ws.tree / "d" / "a").unlink()
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == [], r
    assert not os.path.lexists(ws.tree / "d")
    assert changes(ws) == {}


def test_a_taken_conflict_is_no_start_for_a_later_deletion(tmp_path: Path) -> None:
    """Both changed d/a, the person's version was taken; the agent then changes d/c and the
    person deletes ``d``: d/c is the conflict, d/a (the person's, as taken) goes. The start
    kept for the old conflict (the version both started from) made d/a a conflict again."""
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    (tree / "d" / "a").write_text("person's new a\n")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/a"], r
    ws.take("d/a")
    with again(tmp_path, tree).command():
        (ws.tree / "d" / "c").write_text("agent c\n")
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/c"], r
    assert sorted(os.listdir(ws.tree / "d")) == ["c"]
    assert changes(ws) == {"d": "created", "d/c": "created"}


def test_a_deleted_inner_directory_is_merged_the_same(tmp_path: Path) -> None:
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "sub" / "new").write_text("agent new\n")
    shutil.rmtree(tree / "d" / "sub")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/sub/new"], r
    assert sorted(os.listdir(ws.tree / "d" / "sub")) == ["new"]
    assert changes(ws) == {"d/sub": "created", "d/sub/new": "created"}
    before = files(tree)
    for chosen in (None, ["d/sub"], ["d/sub/x"]):
        ws.apply(chosen)
        assert files(tree) == before, chosen


def test_both_deleting_agree(tmp_path: Path) -> None:
    """The agent deleted a file of ``d`` and changed nothing else, the person deleted ``d``:
    nothing is left of it and nothing is a conflict."""
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "b").unlink()
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == [] and r.flowed_in == ["d"], r
    assert not os.path.lexists(ws.tree / "d")
    assert changes(ws) == {}


def test_a_deleted_file_the_agent_modified_is_a_conflict(tmp_path: Path) -> None:
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    (tree / "README").unlink()
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.new_conflicts == ["README"], r
    assert changes(ws) == {"README": "created"}
    before = files(tree)
    assert [i.path for i in ws.apply().refused] == ["README"]
    assert files(tree) == before


def test_a_deleted_file_the_agent_left_alone_is_simply_gone(tmp_path: Path) -> None:
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "a").write_text("agent a\n")
    (tree / "README").unlink()
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.flowed_in == ["README"] and r.conflicts == [], r
    assert not os.path.lexists(ws.tree / "README")
    assert changes(ws) == {"d/a": "modified"}


def test_a_deleted_directory_the_agent_left_alone_is_simply_gone(tmp_path: Path) -> None:
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.flowed_in == ["d"] and r.conflicts == [], r
    assert not os.path.lexists(ws.tree / "d")
    assert changes(ws) == {"README": "modified"}


def test_a_deleted_directory_where_the_agent_only_added_a_file(tmp_path: Path) -> None:
    tree, ws = person_tree(tmp_path)
    with ws.command():
        (ws.tree / "d" / "sub" / "new").write_text("agent new\n")
    shutil.rmtree(tree / "d")
    ws = again(tmp_path, tree)
    with ws.command() as r:
        assert r.conflicts == ["d/sub/new"], r
    assert files(ws.tree / "d") == {"sub": "/", "sub/new": "agent new\n"}
    assert changes(ws) == {"d": "created", "d/sub": "created", "d/sub/new": "created"}
    before = files(tree)
    ws.apply()
    ws.apply(["d/sub/x"])
    assert files(tree) == before
    ws.apply(["d/sub/new"])
    assert files(tree) == {**before, "d": "/", "d/sub": "/", "d/sub/new": "agent new\n"}


# Run in a child: the flow dies by a real SIGKILL (nothing after it runs, no finally) at the
# point named by argv[3]: "sync" once the base sync has journaled ``d`` (base not yet
# changed there), "merge" at the second entry the three-way merge removes, "save" as the
# workspace saves its conflicts after the merge.
KILLED = """
import os, signal, sys
from pathlib import Path
from sprawl_orch.changes import workspace_flow, workspace_merge
from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.copy.bounds import Bounds
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
where = sys.argv[3]
if where == "sync":
    real_before = workspace_flow.Flow.before
    def before(self, rel, mode_only):
        real_before(self, rel, mode_only)
        if rel == "d":
            die()
    workspace_flow.Flow.before = before
elif where == "merge":
    real, calls = workspace_merge.delete_path, []
    def dying(*args):
        calls.append(args)
        if len(calls) == 2:
            die()
        return real(*args)
    workspace_merge.delete_path = dying
else:
    Workspace._save = lambda *args: die()
with Workspace(Path(sys.argv[1]), Path(sys.argv[2]), "w", Bounds()).command():
    pass
"""


def test_a_flow_killed_mid_way_is_finished_three_way(tmp_path: Path) -> None:
    for where in ("sync", "merge", "save"):
        here = tmp_path / where
        here.mkdir()
        tree, ws = person_tree(here)
        with ws.command():
            (ws.tree / "d" / "a").write_text("agent a\n")
            (ws.tree / "d" / "new").write_text("agent new\n")
        shutil.rmtree(tree / "d")
        before = files(tree)
        killed = subprocess.run(
            [sys.executable, "-c", KILLED, str(here / "state"), str(tree), where],
            check=False,
        )
        assert killed.returncode == -signal.SIGKILL, where
        ws = again(here, tree)
        with ws.command() as r:
            assert r.conflicts == ["d/a", "d/new"], (where, r)
        assert sorted(os.listdir(ws.tree / "d")) == ["a", "new"], where
        assert changes(ws) == {"d": "created", "d/a": "created", "d/new": "created"}, where
        for chosen in (None, ["d/b"], ["d/sub/x"]):
            ws.apply(chosen)
        assert files(tree) == before, where
