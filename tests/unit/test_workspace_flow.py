"""The flow-in judged during the base sync and the one-walk comparison (issue 23's speed work,
workspace_flow.py and workspace_walk.py), on real files: a person's directory chmod flows in
as a file's mode does (or is a conflict when the agent changed the same bits); the clean
pairs never hide a rewrite; a flow-in cut short makes the next comparison walk the base."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sprawl_orch.changes import workspace_flow
from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.changes.workspace_state import CLEAN, FLOWING
from sprawl_orch.changes.workspace_walk import Clean


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "proj"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "more.py").write_text("def one():\n    return 1\n")
    (tree / "docs").mkdir()
    (tree / "docs" / "a.md").write_text("a\n")
    return tree, tmp_path / "state"


def bits(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_person_directory_chmod_flows_in(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "pkg" / "more.py").write_text("agent\n")  # an agent change inside it
    os.chmod(tree / "pkg", 0o750)
    with ws.command() as r:
        assert r.flowed_in == ["pkg"] and r.conflicts == []
    assert bits(ws.tree / "pkg") == 0o750
    assert (ws.tree / "pkg" / "more.py").read_text() == "agent\n"  # not replaced whole
    assert [e.path for e in ws.show().changes] == ["pkg/more.py"]


def test_directory_chmod_on_both_sides_is_a_conflict(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        os.chmod(ws.tree / "docs", 0o705)
    os.chmod(tree / "docs", 0o750)
    with ws.command() as r:
        assert r.new_conflicts == ["docs"] and r.flowed_in == []
    assert bits(ws.tree / "docs") == 0o705  # the agent's stays
    os.chmod(tree / "docs", 0o705)  # the person comes round to the agent's bits
    with ws.command() as r:
        assert r.conflicts == []


def test_same_length_rewrite_in_the_tree_is_never_vouched_for(project: tuple[Path, Path]) -> None:
    """The agent rewrites a file with bytes of the same length and sets its mtime back: the
    clean pairs hold the inode's ctime, which moved, so the change is seen."""
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        pass
    assert ws.show(ended=ws.last_mark).changes == []  # pairs learned
    f = ws.tree / "pkg" / "more.py"
    before = f.stat()
    with ws.command():
        f.write_text("def one():\n    return 2\n")
        os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert f.stat().st_size == before.st_size
    assert [e.path for e in ws.show().changes] == ["pkg/more.py"]


def test_clean_pairs_round_trip_and_torn_loads_empty(tmp_path: Path) -> None:
    clean = Clean({"": {"a": (1, 2, 3)}, "d/e": {"f": (4, 5, 6)}}, line=99)
    path = tmp_path / "clean"
    clean.save(path)
    loaded = Clean.load(path)
    assert loaded.pairs == clean.pairs and loaded.line == 99
    path.write_bytes(path.read_bytes()[:-1])
    assert Clean.load(path).pairs == {}
    assert clean.forget(["d"]) and clean.pairs == {"": {"a": (1, 2, 3)}}


def test_flow_in_cut_short_walks_the_base(
    project: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flow-in killed after the base sync wrote the person's edit (its record and clean
    pairs no longer describe base): the journal it leaves makes the next comparison walk the
    base and ignore the pairs, and the next flow-in finish the judged paths first."""
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        pass
    ws.show(ended=ws.last_mark)
    (tree / "docs" / "a.md").write_text("person\n")

    def killed(
        self: workspace_flow.Flow, conflicts: set[str], bits: set[str] | None = None
    ) -> tuple[list[str], list[str]]:
        raise KeyboardInterrupt  # the process dies between the sync and the flow

    monkeypatch.setattr(workspace_flow.Flow, "finish", killed)
    with pytest.raises(KeyboardInterrupt), ws.command():
        pass
    monkeypatch.undo()
    assert (ws.dir / FLOWING).exists() and (ws.dir / CLEAN).exists()
    fresh = Workspace(state, tree, "w")
    # base holds the person's edit, the tree not: shown as a difference, never hidden
    assert [e.path for e in fresh.show().changes] == ["docs/a.md"]
    # The next flow-in finishes what the journal says was judged: the edit reaches the
    # tree, and nothing is left for an apply to write over the person's file.
    with fresh.command() as r:
        assert r.flowed_in == ["docs/a.md"]
    assert (fresh.tree / "docs" / "a.md").read_text() == "person\n"
    assert fresh.show().changes == [] and not (ws.dir / FLOWING).exists()
    assert not fresh.apply().applied and (tree / "docs" / "a.md").read_text() == "person\n"
