"""Per-run cgroups for real, through the v1 memory and cpu hierarchies of this project's machines.

These hosts are hybrid: /sys/fs/cgroup/memory and /cpu are v1 and writable by root, the v2 mount
has no controllers (ENVIRONMENT.md). The kernel enforces the run's memory.limit_in_bytes, its
OOM killer kills the allocating process, and memory.oom_control's oom_kill counts it. On a v2
host (GitHub's runners) these v1 paths don't exist; the v2 logic is covered by the fake-tree unit
tests there.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.runs.backlog import Backlog
from sprawl_orch.runs.cgroups import Delegation, delegation
from sprawl_orch.runs.shares import Shares
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool

MIB = 2**20
LIMIT = 64 * MIB
HOG = "b = bytearray(300 * 1024 * 1024); print('survived')"


@pytest.fixture(scope="module")
def v1(v1_delegation: Delegation) -> Delegation:
    return v1_delegation


@pytest.fixture
def tool(tmp_path: Path, v1: Delegation) -> Iterator[ExecTool]:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "README").write_text("hi\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    offerings = Offerings(
        platform="linux", scratch=scratch, nice=shutil.which("nice"), ionice=shutil.which("ionice")
    )
    config = parse_config(
        {"sandbox": {"arm": "copied_tree"}, "state": {"dir": str(tmp_path / "state")}}
    )
    with ExecTool(
        config, tree, offerings=offerings, shares=Shares.cpu_and_memory(LIMIT)
    ) as exec_tool:
        yield exec_tool
    for hierarchy in v1.parents.values():
        assert not (hierarchy / "sprawl-orch" / exec_tool.session).exists()


def until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def cmdline(pid: int) -> list[str]:
    """[] for a process gone meanwhile (the subshell of `(x &)` exits at once)."""
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_dir(v1: Delegation, tool: ExecTool, hierarchy: str, run: str) -> Path:
    return v1.parents[hierarchy] / "sprawl-orch" / tool.session / f"run-{run}"


def oom_kills(path: Path) -> int:
    for line in (path / "memory.oom_control").read_text().splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    raise AssertionError("no oom_kill line")


def test_allocating_past_the_run_limit_is_reported_hit(tool: ExecTool, v1: Delegation) -> None:
    calm = tool.exec(["python3", "-c", "print(len(bytearray(8 * 1024 * 1024)))"], run="r")
    assert calm.exit_code == 0 and calm.memory_ceiling is None
    memory = run_dir(v1, tool, "memory", "r")
    assert (memory / "memory.limit_in_bytes").read_text().strip() == str(LIMIT)
    assert (run_dir(v1, tool, "cpu", "r") / "cpu.shares").read_text().strip() == "1024"
    before = oom_kills(memory)
    hog = tool.exec(["python3", "-c", HOG], run="r")
    print("hog result:", hog.exit_code, hog.memory_ceiling)
    assert "survived" not in hog.stdout
    assert hog.exit_code == 137  # SIGKILL (128+9): the OOM killer, inside the run's cgroup
    assert hog.limits_hit == ["memory"] and "memory ceiling" in hog.statement
    assert oom_kills(memory) == before + 1
    assert hog.memory_ceiling is not None
    assert hog.memory_ceiling["state"] == "hit"
    assert hog.memory_ceiling["limit_bytes"] == LIMIT
    # Another run is not touched by r's ceiling count.
    other = tool.exec(["true"], run="other")
    assert other.memory_ceiling is None


def cgroup_paths(pid: int) -> dict[str, str]:
    paths = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            paths[name] = path
    return paths


def test_commands_and_their_children_are_in_the_run_from_the_start(
    tool: ExecTool, v1: Delegation
) -> None:
    result = tool.exec(
        ["sh", "-c", "sleep 361 & sh -c 'sleep 362 & wait' & wait"], run="r", timeout=0.3
    )
    assert result.outcome == "backgrounded"
    # The shells fork on their own time: 0.3 s was not always enough for all four under load.
    until(lambda: len(tool.processes()["r"].pids) >= 4)
    report = tool.processes()["r"]
    assert report.unfollowed == 0
    assert report.share == Shares.cpu_and_memory(LIMIT)
    assert len(report.pids) >= 4
    for pid in report.pids:
        paths = cgroup_paths(pid)
        assert paths["memory"].endswith(f"/sprawl-orch/{tool.session}/run-r"), paths
        assert paths["cpu"] == f"/sprawl-orch/{tool.session}/run-r", paths


def test_release_kills_an_escaped_daemon_and_removes_the_cgroup(
    tool: ExecTool, v1: Delegation
) -> None:
    # The subshell exits at once: `sleep 363` is reparented and in its own session, out of
    # reach of the process group and of psutil's children(); only the cgroup still has it.
    result = tool.exec(["sh", "-c", "(setsid sleep 363 &); sleep 364"], run="r", timeout=0.3)
    assert result.outcome == "backgrounded"

    def daemons() -> list[int]:
        return [p for p in tool.processes()["r"].pids if cmdline(p) == ["sleep", "363"]]

    until(lambda: len(daemons()) == 1)  # setsid execs sleep on its own time
    daemon = daemons()
    released = tool.release("r")
    assert len(released) == 1 and released[0].killed
    until(lambda: not any(running(p) for p in daemon))
    assert not run_dir(v1, tool, "memory", "r").exists()
    assert not run_dir(v1, tool, "cpu", "r").exists()
    assert "r" not in tool.processes()


def test_without_delegation_the_ceiling_is_unapplied(tmp_path: Path, v1: Delegation) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    offerings = Offerings(platform="linux", scratch=scratch, nice=shutil.which("nice"))
    config = parse_config(
        {"sandbox": {"arm": "copied_tree"}, "state": {"dir": str(tmp_path / "state")}}
    )
    backlog = Backlog(
        "nodeleg", Shares.cpu_and_memory(LIMIT), found=delegation(tmp_path / "not-a-cgroupfs")
    )
    with ExecTool(config, tree, offerings=offerings, backlog=backlog) as tool:
        result = tool.exec(["python3", "-c", "print('ran')"], run="r")
        assert result.stdout == "ran\n"
        assert result.memory_ceiling is not None
        assert result.memory_ceiling["state"] == "unapplied"
        assert result.memory_ceiling["why"] == "not_delegated"
        assert "not delegated" in result.memory_ceiling["detail"]
    assert backlog.close() is None
    for hierarchy in v1.parents.values():
        assert not (hierarchy / "sprawl-orch" / "nodeleg").exists()
