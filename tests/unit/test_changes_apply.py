"""`changes` and `apply` edge cases with real commands on the copied tree (docs/changes.md):
hidden edits, no-op writes, unverifiable stamps, links in the working directory, the budget,
set-uid bits, trusted-stamp conflicts, deleted directories that gained entries."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from sprawl_orch.core import fs_clock
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config


def tool_for(tmp_path: Path, tree: Path, offerings: Offerings, **state: object) -> ExecTool:
    config = make_config(tmp_path, arm="copied_tree")
    if state:
        config = config.model_copy(update={"state": config.state.model_copy(update=state)})
    return ExecTool(config, tree, offerings=offerings, record=False)


@pytest.fixture
def trusted_sources(tree: Path) -> None:
    """The tree's stamps older than the sync's margin (copy_stamps: 20 ms on local
    filesystems, up to 2 s elsewhere), so they are trusted, as for any file not just written."""
    assert fs_clock.granularity_ns(tree.stat().st_dev) == fs_clock.TICK_MARGIN_NS
    time.sleep(fs_clock.TICK_MARGIN_NS / 1e9 + 0.05)


def test_an_edit_hidden_behind_an_old_mtime_is_found(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    with tool_for(tmp_path, tree, offerings) as tool:
        # Same size, mtime set back to what it was: only the ctime (and the bytes) tell.
        line = "m=$(stat -c %Y README); echo README > README; touch -d @$m README"
        result = tool.exec(line, shell=True)
    assert result.changes is not None
    assert [(e.path, e.change) for e in result.changes.paths] == [("README", "modified")]


def test_touch_and_same_bytes_rewrite_are_no_change(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec(
            "touch README; cat src/a.py > t; mv t src/a.py; chmod 644 README", shell=True
        )
    assert result.changes is not None and result.changes.total == 0, result.changes


def test_unverifiable_bytes_are_modified_unverified(
    tmp_path: Path, tree: Path, offerings: Offerings, trusted_sources: None
) -> None:
    with tool_for(tmp_path, tree, offerings) as tool:
        # The command rewrites README with its own bytes, and meanwhile the person edits the
        # source: no hash, no trustworthy source left to compare with.
        line = f"cat README > t; mv t README; echo other > {tree}/README"
        result = tool.exec(line, shell=True)
    assert result.changes is not None
    [entry] = result.changes.paths
    assert (entry.path, entry.change, entry.verified) == ("README", "modified", False)


def test_a_link_in_the_working_directory_is_never_written_through(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("echo new > src/b.py; echo changed > src/a.py", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        (tree / "src").rename(tree / "src-moved")
        (tree / "src").symlink_to(outside)  # the person (or anyone) swaps in a link
        applied = tool.apply(result.changes.handle)
    assert applied.applied == []
    assert {i.path for i in applied.refused} == {"src/a.py", "src/b.py"}
    assert all("symbolic link" in (i.why or "") for i in applied.refused)
    assert list(outside.iterdir()) == []


def test_the_budget_drops_the_oldest_and_says_so(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    with tool_for(tmp_path, tree, offerings, changes_budget_bytes=60000) as tool:
        # what the host's disk holds counts: blocks, a directory, the manifest (store.py)
        first = tool.exec("head -c 40000 /dev/zero > one", shell=True).changes
        second = tool.exec("head -c 40000 /dev/zero > two", shell=True).changes
        huge = tool.exec("head -c 70000 /dev/zero > three", shell=True).changes
        assert first is not None and second is not None and huge is not None
        assert first.kept and second.kept and second.dropped == [first.handle]
        assert second.note is not None and "dropped" in second.note
        assert not huge.kept and huge.note is not None and "budget" in huge.note
        assert huge.total == 1 and huge.paths[0].path == "three"  # still reported
        with pytest.raises(SprawlError) as err:
            tool.apply(str(first.handle))
    assert err.value.code.value == "E_UNKNOWN_HANDLE" and "budget" in err.value.detail


def test_setuid_is_never_carried(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("echo x > tool; chmod 4755 tool", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        tool.apply(result.changes.handle)
    assert stat.S_IMODE((tree / "tool").stat().st_mode) == 0o755


def test_a_same_size_edit_conflicts_by_stamp(
    tmp_path: Path, tree: Path, offerings: Offerings, trusted_sources: None
) -> None:
    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("echo CHANGED > README", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        (tree / "README").write_text("README\n")  # same size as "readme\n"
        applied = tool.apply(result.changes.handle)
    [refused] = applied.refused
    assert refused.why is not None and refused.why.startswith("conflict")
    assert refused.at_sync is not None and refused.now is not None
    assert refused.at_sync["ctime_ns"] != refused.now["ctime_ns"]
    assert (tree / "README").read_text() == "README\n"


def test_a_deleted_directory_that_gained_entries_is_kept(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("rm -r src", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        (tree / "src" / "mine.py").write_text("the person's\n")
        applied = tool.apply(result.changes.handle)
    assert [i.path for i in applied.applied] == ["src/a.py"]
    assert [i.path for i in applied.refused] == ["src"]
    assert (tree / "src" / "mine.py").read_text() == "the person's\n"


def test_apply_refuses_another_working_directory(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    from sprawl_orch.changes.apply import apply

    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("echo x > new", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        with pytest.raises(SprawlError) as err:
            apply(tool.state, result.changes.handle, workdir=tmp_path)
    assert "were made from" in err.value.detail
    assert not os.path.exists(tmp_path / "new")


def test_a_name_that_is_not_utf8_is_shown_escaped_and_applied_exactly(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("printf x > \"$(printf 'bad\\377')\"", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        assert result.as_json_dict()["changes"]["paths"][0]["path"] == "bad\\xff"
        dry = tool.apply(result.changes.handle, dry_run=True)
        assert dry.diff is not None and "+++ b/bad\\xff\n" in dry.diff
        dry.model_dump_json()  # serve and MCP send it: it must encode
        tool.apply(result.changes.handle)
    assert (tree / os.fsdecode(b"bad\xff")).read_text() == "x"


def test_an_apply_killed_after_its_last_write_is_finished_by_the_next(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    """SIGKILL between the last record_applied() and drop(): every path is 'applied before'
    and the next apply must still remove the store (the chaos test met this once)."""
    from sprawl_orch.changes.store import load, record_applied

    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("echo x > new; echo y > README", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        handle = result.changes.handle
        kept = load(tool.state, handle)
        record_applied(kept, [e.path for e in kept.entries])
        again = tool.apply(handle)
    assert again.finished and again.refused == [] and again.applied == []
    assert {s.why for s in again.skipped} == {"applied before"}
    assert not kept.dir.exists()


def test_leftovers_of_killed_keeps_and_drops_are_swept(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    from sprawl_orch.changes.store import changes_root

    with tool_for(tmp_path, tree, offerings) as tool:
        root = changes_root(tool.state)
        root.mkdir(parents=True, exist_ok=True)
        for name in (".drop-h-1234abcd", ".h.old0", ".h.live"):
            (root / name / "blobs").mkdir(parents=True)
        os.utime(root / ".h.old0", (time.time() - 7200,) * 2)
        result = tool.exec("echo x > new", shell=True)
        assert result.changes is not None and result.changes.kept
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".h")) == [".h.live"]
    assert not (root / ".drop-h-1234abcd").exists()


def test_a_mode_change_never_reaches_a_hard_link_outside(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    # the escape suite's apply-mode-through-hardlink: a mode is the inode's, and the tree's
    # file may share it with a name outside (a package store, cp -al)
    outside = tmp_path / "store-file"
    outside.write_text("shared\n")
    outside.chmod(0o644)
    os.link(outside, tree / "linked")
    with tool_for(tmp_path, tree, offerings) as tool:
        result = tool.exec("chmod 0777 linked", shell=True)
        assert result.changes is not None and result.changes.handle is not None
        applied = tool.apply(result.changes.handle, ["linked"])
    assert [i.path for i in applied.refused] == ["linked"]
    assert "hard links" in str(applied.refused[0].why)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
