"""Workspaces (issue 23) through the Python API, on real files: the agent's edits last across
commands, the person's edits flow in, both-changed paths are conflicts with both versions
kept, apply brings the agent's work into the person's tree; and a state machine over random
interleavings against a model: no byte of either side is ever lost."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sprawl_orch.changes.workspace import Workspace, check_name, listing
from sprawl_orch.core.errors import ErrorCode, SprawlError


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "proj"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "more.py").write_text("def one():\n    return 1\n")
    (tree / "tests").mkdir()
    (tree / "tests" / "test_more.py").write_text("from pkg.more import one\n")
    (tree / "README").write_text("readme\n")
    return tree, tmp_path / "state"


def test_edit_lasts_person_flows_in_conflict_kept_apply(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "fix-1")
    with ws.command() as first:
        assert first.created
        (ws.tree / "pkg" / "more.py").write_text("def one():\n    return 'one'\n")
        (ws.tree / "tests" / "test_agent.py").write_text("agent test\n")
    # The next command still sees the agent's work (the bug the issue reports).
    with ws.command() as second:
        assert not second.created and second.flowed_in == [] and second.conflicts == []
        assert (ws.tree / "tests" / "test_agent.py").read_text() == "agent test\n"
    # The person edits another file: it flows in; the agent's edits stay.
    (tree / "README").write_text("person's readme\n")
    with ws.command() as third:
        assert third.flowed_in == ["README"]
        assert (ws.tree / "README").read_text() == "person's readme\n"
        assert "return 'one'" in (ws.tree / "pkg" / "more.py").read_text()
    # Both edit one file: a conflict, the agent's version stays, the person's is kept.
    (tree / "pkg" / "more.py").write_text("def one():\n    return 1.0\n")
    with ws.command() as fourth:
        assert fourth.new_conflicts == ["pkg/more.py"] and fourth.conflicts == ["pkg/more.py"]
    view = ws.show()
    assert Path(view.conflicts["pkg/more.py"]).read_text() == "def one():\n    return 1.0\n"
    assert "return 'one'" in (ws.tree / "pkg" / "more.py").read_text()
    assert {e.path: e.change for e in view.changes} == {
        "pkg/more.py": "modified",
        "tests/test_agent.py": "created",
    }
    # The conflict stays named across commands.
    with ws.command() as fifth:
        assert fifth.conflicts == ["pkg/more.py"] and fifth.new_conflicts == []
    # Apply: the agent's new file lands; the conflict is held back and named.
    result = ws.apply()
    assert [i.path for i in result.applied] == ["tests/test_agent.py"]
    assert [(i.path, i.change) for i in result.refused] == [("pkg/more.py", "conflict")]
    assert (tree / "tests" / "test_agent.py").read_text() == "agent test\n"
    assert (tree / "pkg" / "more.py").read_text() == "def one():\n    return 1.0\n"
    assert (tree / "README").read_text() == "person's readme\n"
    # The person's version taken into the workspace: no change, no conflict left.
    ws.take("pkg/more.py")
    assert ws.show().changes == [] and ws.conflicts() == []
    ws.discard()
    assert not ws.exists() and listing(state) == []


def test_conflict_applied_by_name_takes_the_agents_version(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    (tree / "README").write_text("person\n")
    with ws.command() as r:
        assert r.conflicts == ["README"]
    held = ws.apply(dry_run=True)  # not chosen by name: held back, its diff still shown
    assert [i.change for i in held.refused] == ["conflict"]
    assert held.diff is not None and "-person" in held.diff and "+agent" in held.diff
    dry = ws.apply(["README"], dry_run=True)
    assert dry.diff is not None and "+agent" in dry.diff
    assert (tree / "README").read_text() == "person\n"
    done = ws.apply(["README"])
    assert [i.path for i in done.applied] == ["README"]
    assert (tree / "README").read_text() == "agent\n"
    assert ws.show().changes == [] and ws.conflicts() == []


def test_same_change_on_both_sides_is_no_conflict(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").write_text("same\n")
    (tree / "README").write_text("same\n")
    with ws.command() as r:
        assert r.conflicts == [] and r.flowed_in == []
    assert ws.show().changes == []


def test_held_back_while_another_command_runs(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        pass
    with ws.command():  # a backgrounded server, still running
        (tree / "README").write_text("edited meanwhile\n")
        with ws.command() as tests:
            assert tests.held_back and tests.note and "held back" in tests.note
            assert (ws.tree / "README").read_text() == "readme\n"
    with ws.command() as alone:
        assert not alone.held_back and alone.flowed_in == ["README"]


@pytest.mark.parametrize("name", ["a/b", "..", "x..y", "bad\nname", "tab\there", "", ".hidden"])
def test_bad_names_are_config_invalid(name: str) -> None:
    with pytest.raises(SprawlError) as err:
        check_name(name)
    assert err.value.code is ErrorCode.CONFIG_INVALID


def test_workdir_moved_is_refused_and_the_workspace_kept(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "new").write_text("agent\n")
    tree.rename(tree.with_name("moved"))
    with pytest.raises(SprawlError, match="missing or not a directory"), ws.command():
        pass
    assert ws.exists() and (ws.tree / "new").read_text() == "agent\n"


def test_state_deleted_is_reported_gone(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "new").write_text("agent\n")
    shutil.rmtree(state)
    with pytest.raises(SprawlError, match="is gone"), ws.command(expect=True):
        pass
    with pytest.raises(SprawlError, match="no workspace"):
        ws.show()


# --- the state machine: no byte lost ---------------------------------------------------------

NAMES = ["a", "b", "d/c"]
DATA = st.sampled_from([b"1", b"22", b"333", b"x" * 5])


class NoByteLost(RuleBasedStateMachine):
    """Model: the person's files, the agent's files, and the base they share. After every
    step, every version either side wrote last is somewhere: the person's in the person's
    tree, the agent's in the workspace tree, a conflicting person's version under theirs/."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.tree = self.tmp / "proj"
        (self.tree / "d").mkdir(parents=True)
        for n in NAMES:
            (self.tree / n).write_bytes(b"base")
        self.ws = Workspace(self.tmp / "state", self.tree, "m")
        with self.ws.command():
            pass
        self.person: dict[str, bytes] = {n: b"base" for n in NAMES}
        self.agent: dict[str, bytes] = dict(self.person)
        self.base: dict[str, bytes] = dict(self.person)

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(name=st.sampled_from(NAMES), data=DATA)
    def person_edits(self, name: str, data: bytes) -> None:
        (self.tree / name).write_bytes(data)
        self.person[name] = data

    @rule(name=st.sampled_from(NAMES), data=DATA)
    def agent_edits(self, name: str, data: bytes) -> None:
        (self.ws.tree / name).write_bytes(data)
        self.agent[name] = data

    @rule()
    def command(self) -> None:
        with self.ws.command() as r:
            for n in NAMES:
                agent_changed = self.agent[n] != self.base[n]
                if not agent_changed:
                    self.agent[n] = self.person[n]
                elif self.person[n] == self.base[n] or self.agent[n] == self.person[n]:
                    pass  # only the agent changed it, or both made the same change
                else:
                    assert n in r.conflicts
                    theirs = self.ws.dir / "theirs" / n
                    assert theirs.read_bytes() == self.person[n]
                self.base[n] = self.person[n]

    @rule(take=st.booleans())
    def apply(self, take: bool) -> None:
        self.command()  # apply flows the person's edits in first, as a command does
        conflicts = self.ws.conflicts()
        if take and conflicts:
            self.ws.take(conflicts[0])
            self.agent[conflicts[0]] = self.person[conflicts[0]]
            return
        result = self.ws.apply()
        assert sorted(i.path for i in result.refused) == conflicts
        for n in NAMES:
            if n not in conflicts:
                self.person[n] = self.base[n] = self.agent[n]

    @rule()
    def discard(self) -> None:
        self.ws.discard()
        with self.ws.command():
            pass
        self.agent = dict(self.person)
        self.base = dict(self.person)

    @invariant()
    def nothing_lost(self) -> None:
        assert files(self.tree) == self.person
        assert files(self.ws.tree) == self.agent


NoByteLost.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_no_byte_lost = NoByteLost.TestCase
