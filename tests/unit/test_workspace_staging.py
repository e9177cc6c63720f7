"""A run killed inside ``replace_path`` leaves nothing in a workspace's trees (issue 23): the new
entry is written in the workspace's staging directory, not beside the entry it replaces. It
used to be `.NAME.sprawl-new-<pid>` next to the file, where the agent's next command saw it
and `changes` listed it as the agent's work. Real processes, a real SIGKILL mid-copy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sprawl_orch.changes.workspace_diff import replace_path
from sprawl_orch.changes.workspace_state import BASE, STAGING, TREE

KILLER = """
import sys
from pathlib import Path
from sprawl_orch.changes.workspace_diff import replace_path
ws = Path(sys.argv[1])
replace_path(ws / "tree", ws / "base", "big")
"""


def entries(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_kill_mid_copy_leaves_nothing_in_the_trees(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / TREE / "big").mkdir(parents=True)
    (ws / BASE).mkdir()
    # A directory of many files: the copy takes long enough to be killed inside it.
    for i in range(1500):
        (ws / TREE / "big" / f"f{i:05d}").write_bytes(b"x" * 512)
    before = entries(ws / BASE)
    child = subprocess.Popen([sys.executable, "-c", KILLER, str(ws)])
    deadline = time.monotonic() + 60
    # Killed as soon as its new entry exists and is being filled.
    while time.monotonic() < deadline and child.poll() is None:
        staged = list((ws / STAGING).glob("*/*")) if (ws / STAGING).exists() else []
        if staged:
            break
        time.sleep(0.001)
    assert child.poll() is None, "the copy ended before it could be killed: make it bigger"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert entries(ws / BASE) == before, "a killed copy left something in base"
    assert not [n for n in entries(ws) if "sprawl-new" in n]
    assert os.listdir(ws / STAGING), "the killed copy's entry is in staging"
    # The next replace removes what the dead process left, and does its own work.
    (ws / TREE / "small").write_text("s\n")
    replace_path(ws / TREE, ws / BASE, "small")
    assert (ws / BASE / "small").read_text() == "s\n"
    assert os.listdir(ws / STAGING) == []


def test_a_live_writers_staged_entry_is_left_alone(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / TREE).mkdir(parents=True)
    (ws / BASE).mkdir()
    (ws / STAGING).mkdir()
    live = subprocess.Popen(["sleep", "30"])
    try:
        (ws / STAGING / f"{live.pid}-1-1").write_text("being written\n")
        (ws / STAGING / "999999999-1-1").write_text("a dead one's\n")
        (ws / TREE / "a").write_text("a\n")
        replace_path(ws / TREE, ws / BASE, "a")
        assert os.listdir(ws / STAGING) == [f"{live.pid}-1-1"]
    finally:
        live.kill()
        live.wait()
