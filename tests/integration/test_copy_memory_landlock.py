"""A landlock command of one slot sets the mode and the mtime of another slot's copy file by
its path (design §5.1, atkmem): as root every landlock and bwrap command runs as the one
sandbox uid, which owns those copies, and Landlock governs no chmod or utime -- with the
filesystem axis kept, so no writer note was taken. The next command in that slot, its memory
of the copy trusted, saw mode 0000 and a year-2000 mtime where the person's file is 0644 of
today: the resync never looks at a remembered copy file. Each real: bwrap and landlock as the
slot's arm, landlock as the writer, nothing replaced (`Spy` only counts).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing
from tests.integration.test_copy_memory_real import Spy
from tests.integration.test_landlock_real import landlock_config, need_landlock

# argv[1]: another slot's copy file: bits and times set as the sandbox uid may, its bytes kept
SET_BACK = "import os,sys;os.chmod(sys.argv[1],0);os.utime(sys.argv[1],ns=(0,946684800*10**9))"


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_a_landlock_command_cannot_leave_another_copy_unlike_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mechanism: str
) -> None:
    need_landlock()
    if os.geteuid() != 0:
        pytest.skip("the filesystem axis is claimed for a root caller only (docs/landlock.md)")
    os.chmod(tmp_path, 0o755)  # pytest makes it 0700: the sandbox uid must reach the tree
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True, mode=0o755)
    os.chmod(tree, 0o755)
    for i in range(5):
        (tree / "d" / f"f{i}").write_bytes(b"%08d" % i)
        os.chmod(tree / "d" / f"f{i}", 0o644)
    (tmp_path / "scratch").mkdir()
    spy = Spy(monkeypatch)
    own = parse_config(landlock_config(tmp_path, mechanism=mechanism))
    # Another config (the same state directory): another key, so another slot.
    other = landlock_config(tmp_path)
    other["sandbox"]["env_passthrough"] = ["LANG"]  # type: ignore[index]
    with ExecTool(own, tree) as tool:
        want = "linux_namespaces" if mechanism == "bwrap" else "landlock"
        if tool.choice.arm.value != want:
            missing(f"the {want} arm is not available here")
        for _ in range(3):
            assert tool.exec(["true"]).exit_code == 0
            time.sleep(0.2)  # the margin waited out: the record's entries are vouched for
        target = next(tool.copies.store.slots()) / "tree" / "d" / "f0"
        with ExecTool(parse_config(other), tree) as writer:
            assert writer.choice.arm.value == "landlock"
            done = writer.exec(["python3", "-c", SET_BACK, str(target)])
            assert done.exit_code == 0, done
        assert stat.S_IMODE(target.stat().st_mode) == 0, "the writer did not reach the copy"
        before = spy.runs
        seen = tool.exec(
            ["python3", "-c", "import os;s=os.stat('d/f0');print(s.st_mode,s.st_mtime_ns)"]
        )
    person = (tree / "d" / "f0").stat()
    assert seen.stdout.split() == [str(person.st_mode), str(person.st_mtime_ns)], (
        f"the next command saw {seen.stdout!r}: the person's file is {person.st_mode:o} "
        f"of {person.st_mtime_ns} (memory trusted: {spy.runs > before})"
    )
