"""A memory of the copy's side, made by real commands (design §5.1, issue 26 item 4): the
`changes` walk after a command of an arm that keeps process_tree leaves it at release, the
next lease trusts it through the gate, and each safeguard voids it where it must.

The library keeps the memory in its own process's memo (core/served_memo.py), as the exec
server keeps it for its calls. `Spy` counts the memory walk's real runs (nothing replaced):
whether the next resync trusted a memory is what these tests assert.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.copy import memory as copy_memory
from sprawl_orch.copy import walk_memory
from sprawl_orch.copy.store import CopyStore, copy_key
from sprawl_orch.core import fs_clock, served_memo
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing
from tests.integration.test_changes_real import _config

ARMS = ["linux_namespaces", "docker"]


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs = 0
        real = walk_memory.MemoryWalk.run

        def run(walk: walk_memory.MemoryWalk, root: int) -> None:
            self.runs += 1
            real(walk, root)

        monkeypatch.setattr(walk_memory.MemoryWalk, "run", run)


@pytest.fixture(params=ARMS)
def tool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    if fs_clock.granularity_ns(os.stat(tmp_path).st_dev) is None:
        missing("the temporary directory's filesystem has no known timestamp margin")
    tree = tmp_path / "tree"
    (tree / "d" / "e").mkdir(parents=True)
    for i in range(40):
        (tree / ("d" if i % 2 else "d/e") / f"f{i}").write_bytes(b"%08d" % i)
    (tmp_path / "scratch").mkdir()
    with ExecTool(_config(tmp_path, request.param, request), tree) as t:
        want = "container" if request.param == "docker" else request.param
        if t.choice.arm.value != want:
            missing(f"the {request.param} arm is not available here")
        yield t


def _settled(tool: ExecTool, spy: Spy) -> None:
    """Two commands, the margin waited out: the next lease has a memory to trust."""
    for _ in range(2):
        assert tool.exec(["true"]).exit_code == 0
        time.sleep(0.2)
    before = spy.runs
    assert tool.exec(["true"]).exit_code == 0
    assert spy.runs == before + 1, "the third lease trusted no memory"


def _copy_of(tool: ExecTool) -> Path:
    slot = next(tool.copies.store.slots())
    return slot / "tree"


def test_a_memory_is_trusted_and_a_command_write_is_undone(
    tool: ExecTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    _settled(tool, spy)
    # A write in place, same size, mtime put back: only the ctime tells (the changes walk).
    line = (
        "import os;p='d/e/f0';s=os.lstat(p);open(p,'r+b').write(b'XXXXXXXX');"
        "os.utime(p,ns=(s.st_atime_ns,s.st_mtime_ns))"
    )
    tool.exec(["python3", "-c", line])
    done = tool.exec(["cat", "d/e/f0"])
    assert done.stdout == "00000000"


def test_a_hard_link_inside_leaves_no_memory(
    tool: ExecTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    _settled(tool, spy)
    tool.exec(["ln", "d/f1", "d/e/alias"])
    before = spy.runs
    assert tool.exec(["ls", "d/e"]).stdout.split().count("alias") == 0
    assert spy.runs == before  # no memory was kept to trust


def test_a_touched_directory_is_put_back(tool: ExecTool, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    _settled(tool, spy)
    tool.exec(["touch", "-d", "2001-01-01", "d/e"])
    copy = _copy_of(tool)
    assert (copy / "d" / "e").stat().st_mtime_ns != (tool.workdir / "d" / "e").stat().st_mtime_ns
    tool.exec(["true"])
    assert (copy / "d" / "e").stat().st_mtime_ns == (tool.workdir / "d" / "e").stat().st_mtime_ns


def test_another_holder_between_voids_the_memory(
    tool: ExecTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    _settled(tool, spy)
    # A resync killed midway (or `copies list`, or the in-process CLI): it held the slot.
    store: CopyStore = tool.copies.store
    held = store.lease(tool.workdir, copy_key(tool.workdir, tool.copies.config_json))
    held.release()
    before = spy.runs
    tool.exec(["true"])
    assert spy.runs == before


def test_a_copied_tree_command_voids_every_memory_until_reboot(
    tool: ExecTool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spy = Spy(monkeypatch)
    _settled(tool, spy)
    copy = _copy_of(tool)
    # A copied_tree command of another slot (another config, the same state directory) runs
    # as the caller and writes this copy in place, its mtime put back.
    target = copy / "d" / "e" / "f0"
    writer = (
        "import os,sys;p=sys.argv[1];s=os.lstat(p);open(p,'r+b').write(b'PLANTED!');"
        "os.utime(p,ns=(s.st_atime_ns,s.st_mtime_ns))"
    )
    env = {**os.environ, "SPRAWL_EXEC_SERVER": "0"}
    config = tmp_path / "other.toml"
    config.write_text(f'[sandbox]\narm = "copied_tree"\n[state]\ndir = "{tmp_path / "state"}"\n')
    cli = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]
    command = [sys.executable, "-c", writer, str(target)]
    done = subprocess.run(
        [*cli, "exec", "--config", str(config), "-C", str(tool.workdir), "--", *command],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"PLANTED!"
    before = spy.runs
    assert tool.exec(["cat", "d/e/f0"]).stdout == "00000000"
    assert spy.runs == before  # the writer note: no memory trusted


# One arm is enough: the CLI's lease is the store's, whatever the arm.
@pytest.mark.parametrize("tool", ["linux_namespaces"], indirect=True)
def test_the_in_process_cli_between_two_calls_voids_the_memory(
    tool: ExecTool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spy = Spy(monkeypatch)
    _settled(tool, spy)
    slots = list(tool.copies.store.slots())
    # The same config as the tool's: the same key, so the CLI leases the same slot.
    config = tmp_path / "same.toml"
    config.write_text(
        f'[sandbox]\narm = "native"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    cli = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]
    done = subprocess.run(
        [*cli, "exec", "--config", str(config), "-C", str(tool.workdir), "--", "true"],
        env={**os.environ, "SPRAWL_EXEC_SERVER": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert list(tool.copies.store.slots()) == slots  # it held this very slot
    before = spy.runs
    tool.exec(["true"])
    assert spy.runs == before
    tool.exec(["true"])  # and a memory is kept again from then on
    assert spy.runs == before + 1


def test_recall_forgets_the_memory_before_it_is_used(tmp_path: Path) -> None:
    key = str(tmp_path / "stamps")
    copy_memory.keep(key, {"token": "t"})
    copy_memory.recall(key)
    assert served_memo.recall("copy-memory", key) is None  # and the server hears None
