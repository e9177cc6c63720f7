"""Attacks on the entry-by-entry merge of a directory both sides made (workspace_merge.py) and
on the staging directory of replace_path (workspace_diff.py), on real files through the Python
API: a SIGKILL at a chosen point of a merge (a real kill of a child process), and a link put
where the staging directory is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.changes.workspace_state import STAGING
from sprawl_orch.copy.bounds import Bounds

# Run in a child: the merge's second replace_path kills the process with SIGKILL, as a kill
# of the CLI mid-merge would (nothing after it runs, no finally, no except).
KILLED_MID_MERGE = """
import os, signal, sys
from pathlib import Path
from sprawl_orch.changes import workspace_merge
from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.copy.bounds import Bounds
real, calls = workspace_merge.replace_path, []
def dying(*args):
    calls.append(args)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args)
workspace_merge.replace_path = dying
with Workspace(Path(sys.argv[1]), Path(sys.argv[2]), "w", Bounds()).command():
    pass
"""


# Killed after the merge, as the workspace saves its conflicts (the marker of the merged
# directory had been removed by then).
KILLED_AT_SAVE = """
import os, signal, sys
from pathlib import Path
from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.copy.bounds import Bounds
Workspace._save = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
with Workspace(Path(sys.argv[1]), Path(sys.argv[2]), "w", Bounds()).command():
    pass
"""


def workspace(tmp_path: Path) -> tuple[Path, Workspace]:
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "README").write_text("readme\n")
    return tree, Workspace(tmp_path / "state", tree, "w", Bounds())


def test_a_merge_killed_midway_is_finished_as_a_merge(tmp_path: Path) -> None:
    """The marker that makes ``d`` a both-made directory was removed first: the replay of a
    merge killed after it judged ``d`` whole, a conflict, and listed the person's files not
    merged yet as the agent's deletions (an apply of them deletes the person's files)."""
    tree, ws = workspace(tmp_path)
    with ws.command():
        (ws.tree / "d").mkdir()
        (ws.tree / "d" / "a").write_text("agent\n")
    (tree / "d").mkdir()
    for name in "pqrs":
        (tree / "d" / name).write_text(f"person {name}\n")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MID_MERGE, str(tmp_path / "state"), str(tree)],
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    again = Workspace(tmp_path / "state", tree, "w", Bounds())
    with again.command() as r:
        assert r.conflicts == [], r
    changes = {e.path: e.change for e in again.show().changes}
    assert changes == {"d/a": "created"}, changes
    assert sorted(os.listdir(again.tree / "d")) == ["a", "p", "q", "r", "s"]
    for name in "pqrs":
        assert (again.tree / "d" / name).read_text() == f"person {name}\n"


def test_a_flow_killed_after_its_merge_does_not_hold_the_agents_files_back(
    tmp_path: Path,
) -> None:
    """Killed after the merge but before the conflicts were saved, the replay named ``d``
    itself a conflict: apply then held the agent's own new file ``d/a`` back."""
    tree, ws = workspace(tmp_path)
    with ws.command():
        (ws.tree / "d").mkdir()
        (ws.tree / "d" / "a").write_text("agent\n")
        (ws.tree / "d" / "both").write_text("agent both\n")
    (tree / "d").mkdir()
    (tree / "d" / "p").write_text("person\n")
    (tree / "d" / "both").write_text("person both\n")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_SAVE, str(tmp_path / "state"), str(tree)],
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    again = Workspace(tmp_path / "state", tree, "w", Bounds())
    with again.command() as r:
        assert r.conflicts == ["d/both"], r
    assert [i.path for i in again.apply(dry_run=True).refused] == ["d/both"]
    assert (again.tree / "d" / "p").read_text() == "person\n"
    assert (again.tree / "d" / "both").read_text() == "agent both\n"
    assert (tmp_path / "state").is_dir()


def test_a_link_at_staging_is_not_followed(tmp_path: Path) -> None:
    """replace_path swept dead writers' leftovers from ``<workspace>/staging`` through a link
    put there: every entry of the directory it pointed to was deleted."""
    tree, ws = workspace(tmp_path)
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep\n")
    (elsewhere / "999999999-1-1").write_text("named like a dead writer's\n")
    staging = ws.tree.parent / STAGING
    if os.path.lexists(staging):
        os.rmdir(staging)
    staging.symlink_to(elsewhere)
    (tree / "new").write_text("person\n")
    with ws.command() as r:
        assert r.flowed_in == ["new"], r
    assert sorted(os.listdir(elsewhere)) == ["999999999-1-1", "precious"]
    assert not staging.is_symlink()
    assert (ws.tree / "new").read_text() == "person\n"


def test_a_file_at_staging_does_not_stop_the_flow(tmp_path: Path) -> None:
    tree, ws = workspace(tmp_path)
    with ws.command():
        (ws.tree / "README").write_text("agent\n")
    staging = ws.tree.parent / STAGING
    if os.path.lexists(staging):
        os.rmdir(staging)
    staging.write_text("not a directory\n")
    (tree / "new").write_text("person\n")
    with ws.command() as r:
        assert r.flowed_in == ["new"], r
    assert (ws.tree / "new").read_text() == "person\n"
