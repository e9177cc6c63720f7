"""HostProcess without process groups (what Windows gets: no killpg, no waitid), forced here.

Real processes: output to files, exit codes, waiting with a window, and kill taking the
leader and the children it started with it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from sprawl_orch.runs import process
from sprawl_orch.runs.process import HostProcess

_CHILD = (
    "import subprocess, sys, time;"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
    "print(p.pid, flush=True); time.sleep(60)"
)


@pytest.fixture(autouse=True)
def no_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "GROUPS", False)


def start(tmp_path: Path, code: str) -> HostProcess:
    return HostProcess([sys.executable, "-c", code], tmp_path, {}, tmp_path / "out")


def test_output_and_exit_code(tmp_path: Path) -> None:
    proc = start(tmp_path, "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")
    assert proc.wait(30)
    done = proc.finish()
    assert (done.exit_code, done.killed) == (3, False)
    assert done.stdout_path.read_text() == "out\n" and done.stderr_path.read_text() == "err\n"


def test_wait_window_then_kill_takes_the_children(tmp_path: Path) -> None:
    proc = start(tmp_path, _CHILD)
    out = tmp_path / "out" / "stdout"
    deadline = time.monotonic() + 30
    while not out.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.02)
    child = psutil.Process(int(out.read_text()))
    assert not proc.wait(0.1)
    assert set(proc.pids()) == {proc.pid, child.pid}
    proc.kill()
    done = proc.finish()
    assert done.killed and done.exit_code != 0
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert proc.pids() == []
