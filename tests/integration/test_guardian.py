"""The guardian against real docker and podman (design §4): SIGKILL the orchestrator -- a
driver process running ExecTool -- and nothing of its session may stay behind.

Every test removes by force whatever the guardian missed, after asserting it missed nothing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from guardian_support import (
    SETTLE_SECONDS,
    Orchestrator,
    containers,
    force_remove,
    guardian_done,
    guardian_events,
    persistent_copies,
    scratch_copies,
    slow_create_wrapper,
    spec,
    wait_for,
)

from sprawl_orch.guardian.reaper import group_members
from sprawl_orch.runs.guardian_client import Guardian

GRACE = 3.0  # the guardian's default


@pytest.fixture
def session() -> Iterator[str]:
    yield f"g{secrets.token_hex(4)}"


@pytest.fixture
def cleanup(session: str) -> Iterator[None]:
    yield
    for engine in ("docker", "podman"):
        # an engine that is absent has nothing to clean
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            force_remove(engine, session)


def test_sigkill_during_a_long_command(
    engine_image: tuple[str, str], tmp_path: Path, session: str, cleanup: None
) -> None:
    engine, image = engine_image
    orch = Orchestrator(
        spec(session, engine, tmp_path, [["sleep", "300"]], image=image), tmp_path / "guardian.log"
    )
    orch.wait_line("exec 1")
    assert wait_for(lambda: bool(containers(engine, session, status="running")), 60), orch.seen
    assert persistent_copies(tmp_path / "state") == [True], "the command holds its copy"
    killed = orch.sigkill()
    assert wait_for(lambda: not containers(engine, session), SETTLE_SECONDS)
    gone_after = time.monotonic() - killed
    done = guardian_done(tmp_path / "guardian.log")
    assert done["left"] == [] and done["problems"] == []
    assert scratch_copies(tmp_path / "scratch") == []
    # The persistent copy stays for the next call, released (its lock died with the holder).
    assert persistent_copies(tmp_path / "state") == [False]
    print(f"{engine}: container gone {gone_after:.2f} s after SIGKILL; guardian: {done}")


def test_sigkill_between_create_and_start(
    engine_image: tuple[str, str], tmp_path: Path, session: str, cleanup: None
) -> None:
    engine, image = engine_image
    gate = tmp_path / "gate"
    # The driver patches its watcher to hold after `created` until the gate exists.
    orch = Orchestrator(
        {**spec(session, engine, tmp_path, [["echo", "never"]], image=image), "hold": str(gate)},
        tmp_path / "guardian.log",
    )
    orch.wait_line("exec 1")
    assert wait_for(Path(str(gate) + ".reached").exists, 60), orch.seen
    # podman 4.3 shows it "Initialized" (the arm's inspect), docker "Created": not running
    assert len(containers(engine, session)) == 1
    assert containers(engine, session, status="running") == [], "held before start"
    orch.sigkill()
    assert wait_for(lambda: not containers(engine, session), SETTLE_SECONDS)
    done = guardian_done(tmp_path / "guardian.log")
    assert done["left"] == []
    assert scratch_copies(tmp_path / "scratch") == []


@pytest.mark.parametrize("slow", [1.0, GRACE + 2.0], ids=["within-grace", "past-grace"])
def test_a_late_create_is_removed_when_it_appears(
    engine_image: tuple[str, str], tmp_path: Path, session: str, cleanup: None, slow: float
) -> None:
    """`expect` was said, the create is still in flight when the orchestrator dies, and it
    lands afterwards -- past the grace period too: the guardian keeps watching while the
    create's CLI process still runs."""
    engine, image = engine_image
    mark = tmp_path / "creating"
    log = tmp_path / "guardian.log"
    slow_create_wrapper(tmp_path / "bin", engine, mark, slow, log=log)
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    orch = Orchestrator(
        spec(session, f"raw-{engine}", tmp_path, [["sleep", "300"]], image=image, run="slow"),
        log,
        env={"PATH": path},
    )
    orch.wait_line("exec 1")
    assert wait_for(mark.exists, 60), orch.seen
    orch.sigkill()
    created = Path(str(mark) + ".id")
    assert wait_for(created.exists, slow + 150), (
        f"the wrapped create never finished: {guardian_events(log)}"
    )
    assert created.read_text().strip(), "the late create made a container"
    assert wait_for(lambda: not containers(engine, session), SETTLE_SECONDS)
    done = guardian_done(tmp_path / "guardian.log")
    assert done["late"] == [f"sprawl-{session}-1"]
    assert done["left"] == []


def test_a_create_in_flight_from_exec_tool_leaves_nothing(
    engine_image: tuple[str, str], tmp_path: Path, session: str, cleanup: None
) -> None:
    """The same through ExecTool: the guardian deletes the copy at once, so the create that
    lands later is refused by the engine (its bind source is gone) or removed -- either way
    nothing stays."""
    engine, image = engine_image
    mark = tmp_path / "creating"
    slow_create_wrapper(tmp_path / "bin", engine, mark, 1.0)
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    orch = Orchestrator(
        spec(session, engine, tmp_path, [["true"]], image=image, run="slow"),
        tmp_path / "guardian.log",
        env={"PATH": path},
    )
    orch.wait_line("exec 1")
    assert wait_for(mark.exists, 60), orch.seen
    orch.sigkill()
    assert wait_for(Path(str(mark) + ".id").exists, 30), "the wrapped create never finished"
    done = guardian_done(tmp_path / "guardian.log")
    assert containers(engine, session) == []
    assert done["left"] == []
    assert scratch_copies(tmp_path / "scratch") == []


def test_sigkill_kills_a_copied_tree_process_group(tmp_path: Path, session: str) -> None:
    pgid_file = tmp_path / "pgid"
    line = f"echo $$ > {pgid_file}; sleep 300 & exec sleep 300"
    orch = Orchestrator(
        spec(session, "copied_tree", tmp_path, [["sh", "-c", line]]), tmp_path / "guardian.log"
    )
    orch.wait_line("exec 1")
    assert wait_for(lambda: pgid_file.exists() and pgid_file.read_text().strip() != "", 30)
    pgid = int(pgid_file.read_text())
    assert wait_for(lambda: len(group_members(pgid)) == 2, 10), group_members(pgid)
    try:
        orch.sigkill()
        assert wait_for(lambda: not group_members(pgid), SETTLE_SECONDS), group_members(pgid)
        done = guardian_done(tmp_path / "guardian.log")
        assert done["pgroups"] == [pgid]
        assert scratch_copies(tmp_path / "scratch") == []
    finally:
        for pid in group_members(pgid):
            os.kill(pid, signal.SIGKILL)


def test_a_reused_pid_is_not_killed(tmp_path: Path) -> None:
    """The group number is announced with the leader's create_time; a live leader whose
    create_time differs is another process that got the pid: it must survive."""
    log = tmp_path / "guardian.log"
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    ours = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        guardian = Guardian("reuse", log=log)
        created = psutil.Process(stranger.pid).create_time()
        guardian.process_group(stranger.pid, created - 7.0)  # "the old process with this pid"
        guardian.process_group(ours.pid, psutil.Process(ours.pid).create_time())
        guardian.close(wait=SETTLE_SECONDS)
        done = guardian_done(log)
        assert done["pgroups"] == [ours.pid]
        assert ours.wait(5) == -signal.SIGTERM
        assert stranger.poll() is None
        assert any(e["event"] == "pgroup-skipped" for e in guardian_events(log))
    finally:
        for proc in (stranger, ours):
            proc.kill()
            proc.wait()


def test_normal_close_leaves_the_guardian_nothing_to_do(
    engine_image: tuple[str, str], tmp_path: Path, session: str, cleanup: None
) -> None:
    engine, image = engine_image
    orch = Orchestrator(
        spec(session, engine, tmp_path, [["true"], ["true"]], image=image),
        tmp_path / "guardian.log",
    )
    orch.wait_line("closed")
    orch.finish()
    done = guardian_done(tmp_path / "guardian.log")
    assert done["removed"] in ({}, {engine: []})
    assert done["late"] == [] and done["left"] == [] and done["scratch"] == []
    assert done["seconds"] < GRACE, "nothing in flight: no grace period to sit out"
    assert containers(engine, session) == []


def test_the_guardian_survives_a_signal_to_the_orchestrators_group(tmp_path: Path) -> None:
    """Ctrl-C / a kill of the whole process group reaches the orchestrator, not the guardian
    (own session), which then cleans up."""
    copy = tmp_path / "sprawl-grp-copy"
    copy.mkdir()
    script = (
        "import os, sys, time; sys.path.insert(0, sys.argv[1]);"
        "from pathlib import Path;"
        "from sprawl_orch.runs.guardian_client import Guardian;"
        f"g = Guardian('grp', log=Path({str(tmp_path / 'guardian.log')!r}));"
        f"g.scratch(Path({str(copy)!r})); print('ok', flush=True); time.sleep(300)"
    )
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-c", script, root],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ok"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = guardian_done(tmp_path / "guardian.log")
    assert done["scratch"] == [str(copy)]
    assert not copy.exists()
