"""Attacks on workspaces (issue 23) through the Python API on real files: what the agent's
commands plant in the workspace's tree, what the person does on the host between commands,
and names a workspace may not take. Each test states the claim it tries to break."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from sprawl_orch.changes.workspace import Workspace, check_name
from sprawl_orch.core.credential_places import Guard
from sprawl_orch.core.errors import ErrorCode, SprawlError
from tests.integration.conftest import missing


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "proj"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "more.py").write_text("def one():\n    return 1\n")
    (tree / "README").write_text("readme\n")
    return tree, tmp_path / "state"


def test_conflict_dry_run_does_not_read_through_the_agents_link(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    """The agent's tree is never followed (workspace_diff.py): a conflicting path the agent
    turned into a link to a host secret must not put the secret's bytes into the dry-run diff
    (an MCP agent can ask for that diff: workspace_apply dry_run)."""
    tree, state = project
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN SECRET KEY-----\n")
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").unlink()
        os.symlink(secret, ws.tree / "README")
    (tree / "README").write_text("person\n")
    with ws.command() as r:
        assert r.conflicts == ["README"]
    dry = ws.apply(dry_run=True)
    assert [i.change for i in dry.refused] == ["conflict"]
    assert "SECRET" not in (dry.diff or "")
    assert "README" in (dry.diff or "")  # the conflict is still shown, as a link


def test_conflict_dry_run_does_not_read_through_a_linked_directory(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    """Same, a directory on the way: the agent turns pkg into a link to a host directory that
    holds more.py; the person edits pkg/more.py; the diff must not show the host file."""
    tree, state = project
    host = tmp_path / "host"
    host.mkdir()
    (host / "more.py").write_text("HOST SECRET\n")
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "pkg" / "more.py").unlink()
        (ws.tree / "pkg").rmdir()
        os.symlink(host, ws.tree / "pkg")
    (tree / "pkg" / "more.py").write_text("person\n")
    with ws.command() as r:
        assert r.conflicts
    dry = ws.apply(dry_run=True)
    assert "HOST SECRET" not in (dry.diff or "")


@pytest.mark.parametrize(
    "name",
    [
        "\U0001d54f" * 64,  # 64 characters, 256 bytes in UTF-8: past NAME_MAX (255)
        "é" * 64 + "x" * 0,  # 128 bytes: fine, checked below as a control
    ][:1],
)
def test_a_name_too_long_in_bytes_is_config_invalid(project: tuple[Path, Path], name: str) -> None:
    """A bad name is E_CONFIG_INVALID, never an OSError from mkdir (ENAMETOOLONG)."""
    tree, state = project
    with pytest.raises(SprawlError) as err:
        ws = Workspace(state, tree, name)
        with ws.command():
            pass
    assert err.value.code == ErrorCode.CONFIG_INVALID


@pytest.mark.parametrize(
    "name", ["fix\u0085", "fix\u009b1", "\u202eexe.txt", "a\u200bb", "a\u2028b", "x\udcff"]
)
def test_unicode_control_and_format_characters_are_config_invalid(name: str) -> None:
    """C1 controls, bidi overrides, zero-width and line separators, lone surrogates: a name
    that displays as something else or cannot be a file name is refused up front."""
    with pytest.raises(SprawlError) as err:
        check_name(name)
    assert err.value.code == ErrorCode.CONFIG_INVALID


@pytest.mark.parametrize("name", ["..", ".", "../x", "a/..", "/abs", "a\x00b", "", "a" * 65])
def test_path_like_names_are_config_invalid(name: str) -> None:
    with pytest.raises(SprawlError) as err:
        check_name(name)
    assert err.value.code == ErrorCode.CONFIG_INVALID


def test_lookalike_and_dash_names_stay_inside_the_workspaces_directory(
    project: tuple[Path, Path],
) -> None:
    """`-rf` and a Cyrillic lookalike of a name are names like any other: each is its own
    workspace under <state>/workspaces, and neither touches the other's work."""
    tree, state = project
    latin, cyr = Workspace(state, tree, "fix"), Workspace(state, tree, "f\u0456x")
    dash = Workspace(state, tree, "-rf")
    for ws, text in ((latin, "latin\n"), (cyr, "cyrillic\n"), (dash, "dash\n")):
        with ws.command():
            (ws.tree / "README").write_text(text)
        assert ws.dir.resolve().is_relative_to((state / "workspaces").resolve())
    assert (latin.tree / "README").read_text() == "latin\n"
    assert (cyr.tree / "README").read_text() == "cyrillic\n"
    dash.discard()
    assert (latin.tree / "README").read_text() == "latin\n" and (tree / "README").exists()


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "../../state", "pkg/../../x"])
def test_take_of_a_path_outside_the_tree_is_refused(project: tuple[Path, Path], path: str) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    (tree / "README").write_text("person\n")
    with ws.command():
        pass
    with pytest.raises(SprawlError) as err:
        ws.take(path)
    assert err.value.code == ErrorCode.BAD_REQUEST
    assert (ws.tree / "README").read_text() == "agent\n"


def test_person_deletes_what_the_agent_edited_is_a_conflict_agent_kept(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    (tree / "README").unlink()
    with ws.command() as r:
        assert r.conflicts == ["README"]
    assert (ws.tree / "README").read_text() == "agent\n"
    assert not (tree / "README").exists()


def test_agent_deletes_what_the_person_edited_keeps_the_persons(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").unlink()
    (tree / "README").write_text("person's\n")
    with ws.command() as r:
        assert r.conflicts == ["README"]
    assert Path(ws.show().conflicts["README"]).read_text() == "person's\n"
    ws.apply()  # not chosen by name: the person's file stays
    assert (tree / "README").read_text() == "person's\n"


def test_file_turned_directory_by_the_person_while_the_agent_edited_it(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    (tree / "README").unlink()
    (tree / "README").mkdir()
    (tree / "README" / "inner").write_text("person inner\n")
    with ws.command() as r:
        assert r.conflicts and all(c.startswith("README") for c in r.conflicts)
    assert (ws.tree / "README").read_text() == "agent\n"
    kept = ws.show().conflicts
    assert any(Path(p).exists() for p in kept.values())
    assert (tree / "README" / "inner").read_text() == "person inner\n"


def test_racy_clean_same_length_rewrite_with_mtime_set_back_flows_in(
    project: tuple[Path, Path],
) -> None:
    """The person rewrites a file with bytes of the same length and sets its mtime back
    (`touch -r`): the ctime moved, so the edit flows in, never missed."""
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        pass
    f = tree / "README"
    before = f.stat()
    f.write_text("README\n")
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    with ws.command() as r:
        assert r.flowed_in == ["README"]
    assert (ws.tree / "README").read_text() == "README\n"


def test_agent_same_length_rewrite_with_mtime_set_back_is_a_change(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        pass
    with ws.command():
        f = ws.tree / "README"
        before = f.stat()
        f.write_text("README\n")
        os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert [(e.path, e.change) for e in ws.show().changes] == [("README", "modified")]


def test_mode_only_changes_flow_both_ways(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        os.chmod(ws.tree / "pkg" / "more.py", 0o755)
    os.chmod(tree / "README", 0o600)
    with ws.command() as r:
        assert r.flowed_in == ["README"]
    assert stat.S_IMODE(os.lstat(ws.tree / "README").st_mode) == 0o600
    assert [(e.path, e.change) for e in ws.show().changes] == [("pkg/more.py", "mode_changed")]
    ws.apply()
    assert stat.S_IMODE(os.lstat(tree / "pkg" / "more.py").st_mode) == 0o755


def test_person_link_into_the_state_directory_is_not_followed_by_flow_in(
    project: tuple[Path, Path],
) -> None:
    """The person's tree holds a link into the workspace's own directory: flow-in copies the
    link as a link (never the bookkeeping it points at), and the agent's work is untouched."""
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "agent.txt").write_text("agent\n")
    os.symlink(ws.dir, tree / "ws-link")
    with ws.command():
        pass
    got = ws.tree / "ws-link"
    assert not got.exists() or got.is_symlink()
    assert (ws.tree / "agent.txt").read_text() == "agent\n"
    assert not (ws.tree / "ws-link" / "meta.json").is_file() or got.is_symlink()


def test_case_only_rename_by_the_person_flows_in(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "pkg" / "more.py").write_text("agent\n")
    os.rename(tree / "README", tree / "readme")
    with ws.command() as r:
        assert sorted(r.flowed_in) == ["README", "readme"]
    assert not (ws.tree / "README").exists() and (ws.tree / "readme").read_text() == "readme\n"
    assert (ws.tree / "pkg" / "more.py").read_text() == "agent\n"


def test_workdir_moved_is_refused_and_the_workspace_kept(project: tuple[Path, Path]) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "agent.txt").write_text("agent\n")
    moved = tree.with_name("moved")
    tree.rename(moved)
    with pytest.raises(SprawlError) as err, ws.command():
        pass
    assert "kept" in str(err.value)
    assert (ws.tree / "agent.txt").read_text() == "agent\n"
    with pytest.raises(SprawlError):
        ws.apply()
    assert (ws.tree / "agent.txt").read_text() == "agent\n"


def test_person_changes_between_dry_run_and_apply_are_not_overwritten(
    project: tuple[Path, Path],
) -> None:
    """The person edits the file the dry-run showed, before `apply`: apply flows the edit in
    first, so it is a conflict held back, never overwritten with what the dry-run showed."""
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    dry = ws.apply(dry_run=True)
    assert [i.path for i in dry.applied] == ["README"]
    (tree / "README").write_text("person, after the dry run\n")
    done = ws.apply()
    assert done.applied == [] and [i.change for i in done.refused] == ["conflict"]
    assert (tree / "README").read_text() == "person, after the dry run\n"
    assert (ws.tree / "README").read_text() == "agent\n"


def test_discard_while_a_command_runs_leaves_the_person_tree_and_a_clean_restart(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    ws = Workspace(state, tree, "w")
    before = (tree / "README").read_bytes()
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
        Workspace(state, tree, "w").discard()  # another process's discard, mid-command
        assert not ws.exists()
    assert (tree / "README").read_bytes() == before
    with ws.command() as again:
        assert again.created and not again.held_back
        assert (ws.tree / "README").read_bytes() == before
    assert ws.running() == 0


def test_a_command_of_one_workspace_holds_back_flow_in_for_another_process(
    project: tuple[Path, Path],
) -> None:
    """A second holder (another CLI process: another Workspace object) starting while the
    first command runs: the person's edit is held back, not flowed in under the first."""
    tree, state = project
    ws = Workspace(state, tree, "w")
    with ws.command():
        pass
    with ws.command():
        (tree / "README").write_text("person\n")
        with Workspace(state, tree, "w").command() as second:
            assert second.held_back and second.flowed_in == []
            assert (ws.tree / "README").read_text() == "readme\n"
    with ws.command() as alone:
        assert alone.flowed_in == ["README"]


def test_take_through_a_directory_the_agent_made_a_link(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    """The agent turns pkg into a link to a host directory; the person edits pkg/more.py:
    taking the person's version must work (it raised a bare NotADirectoryError), bring the
    person's directory back, and never write through the link."""
    tree, state = project
    host = tmp_path / "host"
    host.mkdir()
    (host / "more.py").write_text("HOST\n")
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "pkg" / "more.py").unlink()
        (ws.tree / "pkg").rmdir()
        os.symlink(host, ws.tree / "pkg")
    (tree / "pkg" / "more.py").write_text("person\n")
    with ws.command() as r:
        assert r.conflicts == ["pkg/more.py"]
    ws.take("pkg/more.py")
    assert (host / "more.py").read_text() == "HOST\n"
    assert not (ws.tree / "pkg").is_symlink()
    assert (ws.tree / "pkg" / "more.py").read_text() == "person\n"
    assert ws.conflicts() == [] and ws.show().changes == []


def test_link_retargeted_on_both_sides_is_a_conflict_on_one_flows_in(
    project: tuple[Path, Path],
) -> None:
    tree, state = project
    os.symlink("README", tree / "a")
    os.symlink("README", tree / "b")
    ws = Workspace(state, tree, "w")
    with ws.command():
        (ws.tree / "a").unlink()
        os.symlink("pkg", ws.tree / "a")
    for name in ("a", "b"):  # links inside the tree are copied as links (copy/links.py)
        (tree / name).unlink()
        os.symlink("pkg/more.py", tree / name)
    with ws.command() as r:
        assert r.conflicts == ["a"] and r.flowed_in == ["b"]
    assert os.readlink(ws.tree / "a") == "pkg" and os.readlink(ws.tree / "b") == "pkg/more.py"
    assert os.readlink(Path(ws.show().conflicts["a"])) == "pkg/more.py"


def test_racy_agent_rewrite_on_another_filesystem_is_seen(tmp_path: Path) -> None:
    """The state directory on another filesystem than the tree (tmpfs under /dev/shm): an
    agent's same-length rewrite right after the stamps were learned, its mtime set back, is
    still a change (the clean record trusts stamps only below a line from that filesystem)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        missing("no /dev/shm on another filesystem here")  # fails under CI=true
    state = Path(tempfile.mkdtemp(dir=shm, prefix="ws-attack-"))
    try:
        tree = tmp_path / "proj"
        tree.mkdir()
        (tree / "f").write_text("aaaa\n")
        ws = Workspace(state, tree, "w")
        for i in range(20):  # many tries at landing within the same clock tick
            with ws.command():
                f = ws.tree / "f"
                before = f.stat()
                f.write_text(f"{i:04d}\n")
                os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
            assert [e.path for e in ws.show().changes] == ["f"]
            with ws.command():
                (ws.tree / "f").write_text("aaaa\n")
                os.utime(ws.tree / "f", ns=(before.st_atime_ns, before.st_mtime_ns))
            assert ws.show().changes == []
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_apply_never_writes_through_the_persons_link_out_of_the_tree(tmp_path: Path) -> None:
    """The person's `cfg` is a link to a file outside the tree: the copy holds its content
    (copy/links.py), the agent edits it there; apply refuses rather than writing the file the
    link points at (outside the tree)."""
    # A guard with no places: the test's tree lives under /tmp (a runtime place, never copied
    # through a link by the real guard); what is judged here is apply, not the guard.
    out = tmp_path / "outside"
    out.mkdir(mode=0o755)
    # the copy follows a link only to what everyone may read, every directory on the way
    ways = [(p, stat.S_IMODE(p.stat().st_mode)) for p in (tmp_path, tmp_path.parent)]
    try:
        for p, _ in ways:
            p.chmod(0o755)
        (out / "cfg").write_text("host cfg\n")
        tree = tmp_path / "proj"
        tree.mkdir()
        os.symlink(out / "cfg", tree / "cfg")
        ws = Workspace(tmp_path / "state", tree, "w", guard=Guard((), (), (), grants=False))
        with ws.command():
            assert (ws.tree / "cfg").read_text() == "host cfg\n"
            (ws.tree / "cfg").write_text("agent\n")
        done = ws.apply()
        assert done.applied == [] and [i.path for i in done.refused] == ["cfg"]
        assert (out / "cfg").read_text() == "host cfg\n" and (tree / "cfg").is_symlink()
    finally:
        for p, mode in ways:
            p.chmod(mode)
