"""Writers the note (copy/writers.py, design §5.1) does not see: a copied_tree command, the very
kind the note exists for, still wrote a remembered copy in place and the next bwrap command,
its memory trusted, saw the planted bytes where the person's file holds others (atkmem):

- one run with another state directory (another config, `[state] dir`, XDG_STATE_HOME): its
  note went into that directory, while it reached this one's copies by their path;
- one that deleted the note before writing: it runs as the caller, who owns the note.

Both are strict xfails naming the break (the house form of a known break not fixed here,
tests/escapes/test_shaping.py): anything of the caller's uid can write, forge or delete what
the note keeps, so no note in the caller's reach bounds such a command; the fix is way (b) of
§5.1 (copies that uid cannot write) or no memory, not a better note.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.copy import writers
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing
from tests.integration.test_changes_real import _config
from tests.integration.test_copy_memory_real import Spy

BREAK = "atkmem: the writer note lives where a copied_tree command reaches it (design §5.1)"
# argv[1]: the copy file, written in place with its mtime put back; argv[2:]: files to delete
PLANT = (
    "import os,sys;p=sys.argv[1];[os.unlink(q) for q in sys.argv[2:]];s=os.lstat(p);"
    "open(p,'r+b').write(b'PLANTED!');os.utime(p,ns=(s.st_atime_ns,s.st_mtime_ns))"
)


@pytest.fixture
def tool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    for i in range(5):
        (tree / "d" / f"f{i}").write_bytes(b"%08d" % i)
    (tmp_path / "scratch").mkdir()
    with ExecTool(_config(tmp_path, "linux_namespaces", request), tree) as t:
        if t.choice.arm.value != "linux_namespaces":
            missing("the linux_namespaces arm is not available here")
        yield t


def _plant(tool: ExecTool, state: Path, delete: list[Path]) -> Path:
    target = next(tool.copies.store.slots()) / "tree" / "d" / "f0"
    config = state.parent / f"{state.name}.toml"
    config.write_text(f'[sandbox]\narm = "copied_tree"\n[state]\ndir = "{state}"\n')
    cli = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]
    command = [sys.executable, "-c", PLANT, str(target), *map(str, delete)]
    done = subprocess.run(
        [*cli, "exec", "--config", str(config), "-C", str(tool.workdir), "--", *command],
        env={**os.environ, "SPRAWL_EXEC_SERVER": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"PLANTED!", "the copied_tree command did not reach the copy"
    return target


def _settle(tool: ExecTool) -> None:
    for _ in range(3):
        assert tool.exec(["true"]).exit_code == 0
        time.sleep(0.2)  # the margin waited out: the record's entries are vouched for


@pytest.mark.xfail(strict=True, reason=BREAK)
def test_a_copied_tree_command_of_another_state_directory_is_seen(
    tool: ExecTool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spy = Spy(monkeypatch)
    _settle(tool)
    _plant(tool, tmp_path / "other-state", [])
    before = spy.runs
    seen = tool.exec(["cat", "d/f0"]).stdout
    assert seen == "00000000", f"saw {seen!r} (memory trusted: {spy.runs > before})"


@pytest.mark.xfail(strict=True, reason=BREAK)
def test_a_copied_tree_command_that_deletes_the_note_is_seen(
    tool: ExecTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    _settle(tool)
    state = tool.copies.state
    _plant(tool, state, [state / writers.NOTE])  # noted before it started, then deleted
    before = spy.runs
    seen = tool.exec(["cat", "d/f0"]).stdout
    assert seen == "00000000", f"saw {seen!r} (memory trusted: {spy.runs > before})"
