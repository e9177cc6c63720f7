"""The backlog through the exec tool, with real host processes (copied tree), no cgroups needed.

Cgroup-backed runs are exercised against a fake v2 tree here and for real (v1) in
tests/integration/test_cgroups_v1.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.backlog import Backlog, Pending
from sprawl_orch.runs.ceiling import Unapplied, Why
from sprawl_orch.runs.cgroups import Cgroups, delegation
from sprawl_orch.runs.launch import Finished, Launch
from sprawl_orch.runs.results import Confinement, ExecResult
from sprawl_orch.runs.shares import Shares
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config
from tests.unit.test_cgroups import V2_SELF, fake_rmdir, v2_tree

MIB = 2**20


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def harvest_one(tool: ExecTool) -> ExecResult:
    found: list[ExecResult] = []
    until(lambda: bool(found.extend(tool.harvest()) or found))
    assert len(found) == 1
    return found[0]


def sleeps(pids: list[int]) -> int:
    """How many of these processes are (already) `sleep`: a shell forks its children late."""
    names = []
    for pid in alive(pids):
        with contextlib.suppress(psutil.NoSuchProcess):
            names.append(psutil.Process(pid).name())
    return names.count("sleep")


def alive(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture
def tool(tmp_path: Path, tree: Path, offerings: Offerings) -> ExecTool:
    return ExecTool(make_config(tmp_path, arm="copied_tree"), tree, offerings=offerings)


def test_background_command_is_harvested_with_its_full_result(tool: ExecTool) -> None:
    with tool:
        first = tool.exec(["sh", "-c", "sleep 0.6; echo done; exit 3"], timeout=0.1)
        assert first.outcome == "backgrounded" and first.background
        assert first.handle is not None and first.handle.startswith(tool.session)
        assert first.exit_code is None and "harvest" in (first.detail or "")
        assert tool.harvest() == []
        got = harvest_one(tool)
        assert got.outcome == "settled" and got.background and got.handle == first.handle
        assert (got.stdout, got.exit_code, got.killed) == ("done\n", 3, False)
        assert got.work is not None and got.confinement is not None
        assert got.memory_ceiling is None
        assert tool.harvest() == []


def test_background_command_keeps_its_own_copy(tool: ExecTool) -> None:
    def busy() -> list[bool]:
        return [info.busy for info in tool.copies.store.info()]

    with tool:
        slow = tool.exec(["sh", "-c", "pwd; sleep 0.5; echo late > late.txt"], timeout=0.2)
        assert slow.outcome == "backgrounded"
        assert busy() == [True]
        fast = tool.exec(["sh", "-c", "pwd; ls"])
        # Another slot for the next command: two copies while the first still runs.
        assert busy() == [True, False]
        assert "late.txt" not in fast.stdout
        got = harvest_one(tool)
        assert got.stdout.strip() != fast.stdout.splitlines()[0]
        # Both copies are idle now and reused, resynced to the working directory.
        again = tool.exec(["ls"])
        assert "late.txt" not in again.stdout
        assert busy() == [False, False]
    # Persistent: kept (idle) for the next call, not deleted.
    assert busy() == [False, False]


def test_halt_kills_the_whole_tree(tool: ExecTool) -> None:
    line = "sleep 301 & sh -c 'sleep 302 & wait' & setsid sleep 303 & wait"
    with tool:
        result = tool.exec(["sh", "-c", line], timeout=0.3)
        assert result.handle is not None
        # The shells fork their sleeps on their own time: 0.3 s was not always enough under load.
        until(lambda: sleeps(tool.processes()["default"].pids) == 3)
        pids = tool.processes()["default"].pids
        halted = tool.halt(result.handle)
        assert halted.killed and halted.detail == "halted" and halted.handle == result.handle
        assert alive(pids) == []
        assert tool.processes() == {}
        with pytest.raises(SprawlError) as err:
            tool.halt(result.handle)
        assert err.value.code is ErrorCode.UNKNOWN_HANDLE


def test_release_kills_every_command_of_a_run_and_only_it(tool: ExecTool) -> None:
    with tool:
        a1 = tool.exec(["sleep", "311"], timeout=0.05, run="a")
        a2 = tool.exec(["sh", "-c", "sleep 312 & wait"], timeout=0.05, run="a")
        b = tool.exec(["sleep", "313"], timeout=0.05, run="b")
        assert {a1.outcome, a2.outcome, b.outcome} == {"backgrounded"}
        runs = tool.processes()
        assert set(runs) == {"a", "b"}
        until(lambda: sleeps(tool.processes()["a"].pids) == 2)  # a2's shell forks its sleep
        a_pids = tool.processes()["a"].pids
        assert len(alive(a_pids)) >= 3
        released = tool.release("a")
        assert sorted(r.handle or "" for r in released) == sorted(
            [a1.handle or "", a2.handle or ""]
        )
        assert all(r.killed and "released" in (r.detail or "") for r in released)
        assert alive(a_pids) == []
        assert set(tool.processes()) == {"b"}
        b_pids = tool.processes()["b"].pids
    # close() releases the rest.
    assert alive(b_pids) == []


def test_processes_report_without_shares(tool: ExecTool) -> None:
    with tool:
        tool.exec(["sh", "-c", "sleep 321 & wait"], timeout=0.1, run="r")
        until(lambda: sleeps(tool.processes()["r"].pids) == 1)
        report = tool.processes()["r"]
        assert len(report.pids) >= 2
        assert report.unfollowed == 1  # no cgroup: a double-forked daemon could escape
        assert report.share == Shares()
        assert report.affinity == "os"


def test_a_foreground_command_claimed_by_release_returns_that_result(tool: ExecTool) -> None:
    import threading

    results: list[ExecResult] = []
    with tool:
        worker = threading.Thread(
            target=lambda: results.append(tool.exec(["sleep", "331"], run="r", timeout=30))
        )
        worker.start()
        until(lambda: "r" in tool.processes())
        released = tool.release("r")
        worker.join(10)
        assert len(results) == 1 and results[0] == released[0]
        assert results[0].killed and results[0].handle is None


def test_close_refuses_new_commands_and_kills_background_ones(tool: ExecTool) -> None:
    result = tool.exec(["sleep", "341"], timeout=0.05)
    pids = tool.processes()["default"].pids
    tool.close()
    assert alive(pids) == []
    late = tool.exec(["true"])
    assert late.outcome == "exceptional"
    assert result.handle is not None


# -- memory ceiling marks, against a fake v2 tree -----------------------------------------


def fake_backlog(tmp_path: Path, shares: Shares) -> tuple[Backlog, Path]:
    root = tmp_path / "cgroupfs"
    app = v2_tree(root)
    found = delegation(root, V2_SELF)
    cgroups = Cgroups(found, "t", pid=1, rmdir=fake_rmdir)
    return Backlog("t", shares, found=found, cgroups=cgroups), app


def test_hit_when_the_run_count_moves_while_the_command_runs(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    backlog, app = fake_backlog(tmp_path, Shares.cpu_and_memory(64 * MIB))
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings, backlog=backlog) as tool:
        assert backlog.joining("r") is not None  # the run's cgroup, made for its first command
        events = app / "run-t.r" / "memory.events"
        events.write_text("max 9\noom 0\n")
        calm = tool.exec(["true"], run="r")
        assert calm.memory_ceiling is None  # held and not hit: nothing to say
        hit = tool.exec(["sh", "-c", f"printf 'max 9\\noom 1\\n' > {events}"], run="r")
        assert hit.memory_ceiling is not None
        assert hit.memory_ceiling["state"] == "hit"
        assert hit.memory_ceiling["limit_bytes"] == 64 * MIB
        assert "why" not in hit.memory_ceiling
        procs = (app / "run-t.r" / "cgroup.procs").read_text().split()
        assert len(procs) == 2  # every command joined before it ran
        report = tool.processes()["r"]
        assert report.share == Shares.cpu_and_memory(64 * MIB) and report.unfollowed == 0
        events.unlink()
        unread = tool.exec(["true"], run="r")
        assert unread.memory_ceiling is not None and unread.memory_ceiling["state"] == "unread"
        tool.release("r")
        assert not (app / "run-t.r").exists()
    assert backlog.close() is None


@pytest.mark.parametrize(
    ("root_name", "platform", "why"),
    [("nowhere", "linux", "not_delegated"), ("cgroupfs", "darwin", "platform")],
)
def test_unapplied_ceilings_are_said(
    tmp_path: Path, tree: Path, offerings: Offerings, root_name: str, platform: str, why: str
) -> None:
    root = tmp_path / root_name
    if root_name == "cgroupfs":
        v2_tree(root)
    found = delegation(root, V2_SELF, platform=platform)
    backlog = Backlog("t", Shares.cpu_and_memory(MIB), found=found)
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings, backlog=backlog) as tool:
        result = tool.exec(["true"], run="r")
        assert result.exit_code == 0  # the command runs anyway (seed D29's fallback)
        assert result.memory_ceiling is not None
        assert result.memory_ceiling["state"] == "unapplied"
        assert result.memory_ceiling["why"] == why
        assert result.memory_ceiling["limit_bytes"] == MIB
    backlog.close()


class _Detached:
    """A Running whose processes are not ours to join (the container arm's shape)."""

    def __init__(self, outputs: Path) -> None:
        outputs.mkdir(parents=True, exist_ok=True)
        for name in ("stdout", "stderr"):
            (outputs / name).write_text("")
        self.outputs = outputs

    def wait(self, timeout: float | None) -> bool:
        return True

    def kill(self) -> None:
        return None

    def pids(self) -> list[int]:
        return []

    def finish(self) -> Finished:
        return Finished(0, self.outputs / "stdout", self.outputs / "stderr")


def test_a_command_that_did_not_join_reports_unjoined(tmp_path: Path) -> None:
    backlog, _ = fake_backlog(tmp_path, Shares.cpu_and_memory(MIB))
    join = backlog.joining("r")  # made, but the arm never calls join()
    launch = Launch(
        argv=("true",),
        cwd=tmp_path,
        env={},
        outputs=tmp_path / "out",
        tag="t-1",
        session="t",
        run="r",
        join=join,
    )
    pending = Pending(
        ArmName.CONTAINER,
        ["true"],
        None,
        Confinement(arm="container", statement="", assurances={}),
        None,
        1.0,
        time.monotonic(),
    )
    entry = backlog.enter(_Detached(launch.outputs), launch, pending, join)
    assert isinstance(entry.mark, Unapplied) and entry.mark.why is Why.UNJOINED
    result = backlog.settle(entry, True, True)
    assert result.memory_ceiling is not None and result.memory_ceiling["why"] == "unjoined"
    assert backlog.processes()["r"].unfollowed == 0  # a container is its own whole tree
    backlog.close()
