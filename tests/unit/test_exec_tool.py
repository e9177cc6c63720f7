"""The exec tool end to end on the copied tree and on the host (real processes)."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import psutil

from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_sandbox_write_leaves_source_untouched(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    before = snapshot(tree)
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings) as tool:
        result = tool.exec(["sh", "-c", "echo changed > README; echo new > new.txt; cat README"])
        assert result.outcome == "settled", result
        assert result.exit_code == 0
        assert result.stdout == "changed\n"
        assert result.arm == "copied_tree"
        assert result.work is not None and result.work.created == 2
        assert result.confinement is not None
        # Relative writes land in the copy, but the arm claims no filesystem axis: a write
        # by the tree's own absolute path would reach it (no namespace to prevent it).
        assert result.confinement.assurances["filesystem"] == "no"
        # The next command sees the working directory as it is now, not the last write.
        again = tool.exec(["cat", "README"])
        assert again.stdout == "readme\n"
        assert again.work is not None and again.work.rewritten == 1 and again.work.removed == 1
    assert snapshot(tree) == before


def test_host_write_lands(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings) as tool:
        result = tool.exec(["sh", "-c", "echo host > written.txt"], where="host")
    assert result.arm == "host" and result.where == "host"
    assert result.work is None
    assert (tree / "written.txt").read_text() == "host\n"
    assert result.confinement is not None
    assert set(result.confinement.assurances.values()) == {"no"}


def test_write_limit_create_refuses_host_before_starting(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    config = make_config(tmp_path, arm="copied_tree", write_limit="create")
    with ExecTool(config, tree, offerings=offerings) as tool:
        result = tool.exec(["sh", "-c", "echo x > refused.txt"], where="host")
    assert result.outcome == "exceptional"
    assert result.code == "E_SANDBOX_DENIED"
    assert not (tree / "refused.txt").exists()


def test_missing_program_refused_before_copy(
    tmp_path: Path, tree: Path, scratch: Path, offerings: Offerings
) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings) as tool:
        result = tool.exec(["definitely-not-a-program"])
        assert result.outcome == "exceptional"
        assert result.code == "E_TOOL_UNAVAILABLE"
        assert list(scratch.iterdir()) == []


def test_shell_line_and_interpreter(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(
        config, tree, offerings=offerings, environ={"PATH": os.environ["PATH"], "SHELL": "/bin/sh"}
    ) as tool:
        result = tool.exec("ls | sort; exit 4", shell=True)
    assert result.exit_code == 4
    assert result.stdout == "README\nsrc\n"
    assert result.interpreter == "sh"
    assert result.shell is True


def test_environment_is_floor_plus_passthrough(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    config = make_config(tmp_path, arm="copied_tree", env_passthrough=["KEEP_ME"])
    environ = {"PATH": os.environ["PATH"], "KEEP_ME": "1", "HIDDEN_VALUE": "s3ntinel-value"}
    with ExecTool(config, tree, offerings=offerings, environ=environ) as tool:
        result = tool.exec(["env"])
    home = next(v for v in result.stdout.split() if v.startswith("HOME="))
    assert sorted(result.stdout.split()) == sorted(
        ["KEEP_ME=1", f"PATH={os.environ['PATH']}", home]
    )
    # HOME is the arm's: a private directory the command may write, gone with the command
    assert home.startswith(f"HOME={tmp_path / 'state'}") and not Path(home[5:]).exists()
    assert result.env == ["HOME", "KEEP_ME", "PATH"]
    assert "s3ntinel-value" not in result.model_dump_json()
    assert "HIDDEN_VALUE" not in result.model_dump_json()


def test_window_kills_the_whole_group(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    # Durations of this test's own: another session on the machine runs this same test, and
    # its `sleep 97` is not ours to count.
    a, b = (f"{n}.{secrets.randbelow(10**6):06d}" for n in (97, 98))
    with ExecTool(config, tree, offerings=offerings) as tool:
        result = tool.exec(
            ["sh", "-c", f"sleep {a} & sleep {b}; echo never"], timeout=0.5, background_ok=False
        )
    assert result.killed and result.detail and "window" in result.detail
    assert "never" not in result.stdout

    def left() -> list[int]:
        return [
            p.pid
            for p in psutil.process_iter(["cmdline", "status"])
            if p.info["cmdline"] in (["sleep", a], ["sleep", b])
            and p.info["status"] != psutil.STATUS_ZOMBIE
        ]

    # A SIGKILLed process leaves the process table when its parent reaps it: give that time.
    deadline = time.monotonic() + 10
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left() == []


def test_output_past_cap_is_cut(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings) as tool:
        result = tool.exec(["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' y"])
    assert result.stdout_full is not None
    assert Path(result.stdout_full).stat().st_size == 100000
    assert "cut at 65536 of 100000 bytes" in result.stdout


def test_empty_command(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    with ExecTool(make_config(tmp_path, arm="copied_tree"), tree, offerings=offerings) as tool:
        result = tool.exec([])
    assert result.code == "E_BAD_REQUEST"


def test_the_copy_outlives_the_tool_and_is_resynced(
    tmp_path: Path, tree: Path, scratch: Path, offerings: Offerings
) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    tool = ExecTool(config, tree, offerings=offerings)
    first = tool.exec(["sh", "-c", "echo scribble > README"])
    assert first.work is not None and first.work.created == 2
    assert tool.close() is None
    assert list(scratch.iterdir()) == []  # not a scratch copy any more: kept in the state dir
    [slot] = [info.slot for info in tool.copies.store.info()]
    assert (slot / "tree" / "README").read_text() == "scribble\n"
    with ExecTool(config, tree, offerings=offerings) as again:  # the next CLI call
        second = again.exec(["cat", "README"])
    assert second.stdout == "readme\n"
    assert second.work is not None
    assert (second.work.created, second.work.rewritten, second.work.removed) == (0, 1, 0)
    assert [info.slot for info in again.copies.store.info()] == [slot]


def test_unavailable_arm_refuses_before_copy(
    tmp_path: Path, tree: Path, scratch: Path, offerings: Offerings
) -> None:
    with ExecTool(make_config(tmp_path, arm="container"), tree, offerings=offerings) as tool:
        result = tool.exec(["true"])
    assert result.outcome == "exceptional"
    assert result.code == "E_SANDBOX_DENIED"
    assert "no container engine passed admission" in (result.detail or "")
    assert list(scratch.iterdir()) == []
