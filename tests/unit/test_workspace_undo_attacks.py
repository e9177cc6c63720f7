"""Attacks on a failed flow-in's undo (workspace_flow.py): the CLI killed at each step of the
undo, then run again (the journal's replay). The rule: no byte of the person's tree or the
agent's work is lost, and the person's edits end in the tree or, where the agent changed the
same path, under theirs/."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from sprawl_orch.changes import workspace_flow
from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.changes.workspace_state import FLOWING, THEIRS
from sprawl_orch.copy.bounds import Bounds
from sprawl_orch.core.errors import SprawlError
from tests.unit.test_workspace_fixes import (
    BOUND,
    person_edits_then_over_the_bound,
    project,  # noqa: F401  (the fixture)
    snapshot,
)


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 5, 8])
def test_a_kill_mid_undo_then_a_new_run_loses_nothing(
    project: tuple[Path, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    steps: int,
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w", Bounds(bytes=BOUND))
    with ws.command():
        (ws.tree / "pkg" / "more.py").write_text("agent\n")
        (ws.tree / "agent.txt").write_text("agent's own\n")
        (ws.tree / "old" / "x").write_text("agent x\n")  # the person removes its directory
    agent = snapshot(ws.tree)
    person_edits_then_over_the_bound(tree)
    person = snapshot(tree)
    real = workspace_flow.replace_path
    done = [0]

    def replace_then_die(src: Path, dst: Path, rel: str) -> None:
        if done[0] >= steps:
            raise KeyboardInterrupt  # the CLI killed between two steps of the undo
        done[0] += 1
        real(src, dst, rel)

    real_undo = workspace_flow.Flow.undo

    def undo(self: workspace_flow.Flow) -> None:
        monkeypatch.setattr(workspace_flow, "replace_path", replace_then_die)
        real_undo(self)

    monkeypatch.setattr(workspace_flow.Flow, "undo", undo)
    with (
        pytest.raises((SprawlError, KeyboardInterrupt)),
        Workspace(state, tree, "w", Bounds(bytes=BOUND)).command(),
    ):
        pytest.fail("no command runs after a failed flow-in")
    monkeypatch.undo()
    assert snapshot(tree) == person  # the person's tree is only read
    assert snapshot(ws.tree) == agent  # the undo never writes the agent's tree
    # run again, still over the bound: refused, and still nothing lost
    with (
        pytest.raises(SprawlError),
        Workspace(state, tree, "w", Bounds(bytes=BOUND)).command(),
    ):
        pytest.fail("no command runs after a failed flow-in")
    assert snapshot(tree) == person
    again = snapshot(ws.tree)
    for rel in ("agent.txt", "pkg/more.py", "old/x"):
        assert again[rel] == agent[rel], rel
    # the cause gone: every edit in, the agent's kept, the person's beside it
    (tree / "big1").unlink()
    with Workspace(state, tree, "w", Bounds(bytes=BOUND)).command() as r:
        assert r is not None
    assert (ws.tree / "pkg" / "more.py").read_text() == "agent\n"
    assert (ws.tree / "agent.txt").read_text() == "agent's own\n"
    assert (ws.tree / "old" / "x").read_text() == "agent x\n"
    assert (ws.tree / "README").read_text() == "person readme\n"
    assert (ws.tree / "fresh" / "big2").read_bytes() == (tree / "fresh" / "big2").read_bytes()
    assert (ws.dir / THEIRS / "pkg" / "more.py").read_text() == "person\n"
    assert not (ws.dir / FLOWING).exists()
    final = Workspace(state, tree, "w", Bounds(bytes=BOUND))
    assert sorted(final.conflicts()) == ["old/x", "pkg/more.py"]  # old: deleted around it


def test_a_bits_conflict_the_agent_then_replaced_by_a_file_loses_nothing(
    project: tuple[Path, Path],  # noqa: F811
) -> None:
    """A conflict on pkg's bits alone; the agent then removes pkg and makes it a file, and the
    person adds a file under it: apply writes nothing over the person's pkg (only the agent's
    removal of a file the person left alone), and take gives the person's whole directory
    back."""
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        os.chmod(ws.tree / "pkg", 0o705)
    os.chmod(tree / "pkg", 0o750)
    with ws.command() as r:
        assert r.new_conflicts == ["pkg"]
    with ws.command():
        shutil.rmtree(ws.tree / "pkg")
        (ws.tree / "pkg").write_text("agent's file\n")
    (tree / "pkg" / "keep.py").write_text("person keep\n")
    person = snapshot(tree)
    with ws.command():
        pass
    applied = ws.apply()
    assert not any(i.path == "pkg" for i in applied.applied)
    # the agent's removal of pkg/more.py (the person's unchanged) is its change to make; the
    # person's directory, its bits and its new file are not written over
    del person["pkg/more.py"]
    assert snapshot(tree) == person
    assert (ws.tree / "pkg").read_text() == "agent's file\n"
    ws.take("pkg")
    assert (ws.tree / "pkg" / "keep.py").read_text() == "person keep\n"
    assert stat.S_IMODE(os.lstat(ws.tree / "pkg").st_mode) == 0o750
    assert ws.conflicts() == []
    assert snapshot(tree) == person


def test_take_on_a_bits_conflict_the_agent_made_a_link_never_writes_through_it(
    project: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    tree, state = project
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    (outside / "mine").write_text("not the workspace's\n")
    ws = Workspace(state, tree, "w")
    with ws.command():
        os.chmod(ws.tree / "pkg", 0o705)
    os.chmod(tree / "pkg", 0o750)
    with ws.command() as r:
        assert r.new_conflicts == ["pkg"]
    with ws.command():
        shutil.rmtree(ws.tree / "pkg")
        (ws.tree / "pkg").symlink_to(outside)
    ws.take("pkg")
    assert stat.S_IMODE(os.lstat(outside).st_mode) == 0o700  # the link's target untouched
    assert (outside / "mine").read_text() == "not the workspace's\n"
    assert not (ws.tree / "pkg").is_symlink()
    assert stat.S_IMODE(os.lstat(ws.tree / "pkg").st_mode) == 0o750
    assert (ws.tree / "pkg" / "more.py").read_text() == "def one():\n    return 1\n"
