"""The shared guardian (guardian/server.py): one process serves many callers, each
connection a lifeline cleaned up behind at once when it drops; racing callers start one
guardian; a dead guardian's socket is replaced; it leaves when idle."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from sprawl_orch.runs.guardian_client import Guardian
from tests.integration.guardian_support import wait_for

ROOT = Path(__file__).resolve().parents[2]
CALLER = """
import sys, time
from pathlib import Path
from sprawl_orch.runs.guardian_client import Guardian
sock, session, copy, log = sys.argv[1:5]
g = Guardian(session, socket_path=Path(sock), log=Path(log))
g.scratch(Path(copy))
Path(copy).mkdir()
print("announced", flush=True)
time.sleep(600)
"""


def events(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def servers(sock: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []
        if "--serve" in argv and str(sock) in argv and proc.info["status"] != "zombie":
            found.append(proc)
    return found


def caller(sock: Path, session: str, copy: Path, log: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CALLER, str(sock), session, str(copy), str(log)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "announced"
    return proc


def test_one_guardian_many_lifelines_each_cleaned_at_once(tmp_path: Path) -> None:
    sock, log = tmp_path / "guardian.sock", tmp_path / "guardian.log"
    a = caller(sock, "sa", tmp_path / "sprawl-a", log)
    assert wait_for(sock.exists, 30), "the guardian a started never listened"
    b = caller(sock, "sb", tmp_path / "sprawl-b", log)
    try:
        assert len(servers(sock)) == 1, "two callers, one guardian"
        killed = time.monotonic()
        a.send_signal(signal.SIGKILL)
        a.wait()
        assert wait_for(lambda: not (tmp_path / "sprawl-a").exists(), 10), events(log)
        took = time.monotonic() - killed
        assert (tmp_path / "sprawl-b").exists(), "another caller's copy was touched"
        assert wait_for(lambda: any(e["event"] == "done" for e in events(log)), 10)
        done = [e for e in events(log) if e["event"] == "done"]
        assert [e["session"] for e in done] == ["sa"] and done[0]["scratch"]
        print(f"a killed caller's copy deleted {took * 1000:.0f} ms after the SIGKILL")
        assert took < 5.0
    finally:
        b.kill()
        b.wait()
    assert wait_for(lambda: not (tmp_path / "sprawl-b").exists(), 10)


def test_a_normal_close_hears_done_and_the_guardian_leaves_when_idle(tmp_path: Path) -> None:
    sock, log = tmp_path / "g.sock", tmp_path / "guardian.log"
    environ = {**os.environ, "SPRAWL_GUARDIAN_IDLE": "0.5"}
    g = Guardian("s1", socket_path=sock, log=log, environ=environ)
    g.start()
    assert g.alive and g.problem is None
    copy = tmp_path / "sprawl-1"
    g.scratch(copy)
    copy.mkdir()
    copy.rmdir()
    g.scratch_gone(copy)
    assert g.close(wait=10) == 0
    assert wait_for(lambda: not servers(sock), 15), "the idle guardian did not leave"
    assert not sock.exists()


def test_racing_callers_start_one_guardian(tmp_path: Path) -> None:
    sock, log = tmp_path / "g.sock", tmp_path / "guardian.log"
    guardians = [Guardian(f"r{i}", socket_path=sock, log=log) for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda g: g.start(), guardians))
    try:
        assert all(g.alive for g in guardians), [g.problem for g in guardians]
        # one listens; one spawned by a caller that lost the race serves that caller alone
        assert wait_for(lambda: any(e["event"] == "serving" for e in events(log)), 30)
        serving = [e for e in events(log) if e["event"] == "serving"]
        assert len(serving) == 1, events(log)
    finally:
        assert [g.close(wait=30) for g in guardians] == [0] * 6
    # those that served one caller leave with it; the listening one stays until idle
    assert wait_for(lambda: len(servers(sock)) <= 1, 15), servers(sock)


def test_a_dead_guardians_socket_is_replaced(tmp_path: Path) -> None:
    sock, log = tmp_path / "g.sock", tmp_path / "guardian.log"
    first = Guardian("d1", socket_path=sock, log=log)
    first.start()
    (old,) = servers(sock)
    first.close(wait=10)
    old.send_signal(signal.SIGKILL)  # no chance to unlink its socket
    old.wait(10)
    if not sock.exists():
        # It left on its own first (its last caller closed): leave a dead socket behind
        # the way a killed guardian does -- bound, then nobody listening.
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(sock))
        stale.close()
    assert sock.exists()
    second = Guardian("d2", socket_path=sock, log=log)
    second.start()
    assert second.alive, second.problem
    assert [p.pid for p in servers(sock)] != [old.pid]
    assert second.close(wait=10) == 0


def test_a_caller_meeting_a_closing_guardian_is_served_by_its_own(tmp_path: Path) -> None:
    """A guardian closing for idleness still holds its lock: the one we spawn finds it held,
    serves our connection alone (it is our lifeline from the first byte) and leaves."""
    import fcntl

    from sprawl_orch.guardian.server import lock_path

    sock, log = tmp_path / "g.sock", tmp_path / "guardian.log"
    held = os.open(lock_path(sock), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        g = Guardian("late", socket_path=sock, log=log)
        g.start()
        assert g.alive, g.problem  # at once: nobody waits for the new guardian to boot
        copy = tmp_path / "sprawl-late"
        g.scratch(copy)
        copy.mkdir()
        assert wait_for(lambda: any(e["event"] == "already-serving" for e in events(log)), 30)
        assert g.close(wait=30) == 0  # EOF with a copy held: deleted, nothing left
        assert not copy.exists()
    finally:
        os.close(held)
