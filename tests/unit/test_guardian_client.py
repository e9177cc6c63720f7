"""The orchestrator's end of the guardian pipe, against small stand-in guardian programs
(the real guardian against real engines is tests/integration/test_guardian.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sprawl_orch.guardian.protocol import parse_message
from sprawl_orch.runs import guardian_client
from sprawl_orch.runs.guardian_client import Guardian

# Copies its stdin to a file until EOF, then says so: a guardian minus the cleaning.
RECORDER = "import sys; data = sys.stdin.buffer.read(); open(sys.argv[1], 'wb').write(data)"


def recorder(out: Path) -> list[str]:
    return [sys.executable, "-c", RECORDER, str(out)]


def test_nothing_starts_until_the_first_announcement(tmp_path: Path) -> None:
    guardian = Guardian("s1", argv=recorder(tmp_path / "out"))
    assert guardian.process is None
    guardian.expect("sprawl-s1-1")
    assert guardian.process is not None
    first = guardian.process.pid
    guardian.created("sprawl-s1-1", "abc")
    assert guardian.process.pid == first  # one guardian per session, not per command
    assert guardian.close(wait=10) == 0


def test_lines_arrive_in_order_and_close_is_eof(tmp_path: Path) -> None:
    out = tmp_path / "out"
    guardian = Guardian("s1", argv=recorder(out))
    guardian.expect("sprawl-s1-1")
    guardian.created("sprawl-s1-1", "abc")
    guardian.process_group(4242, 123.25)
    guardian.scratch(tmp_path / "sprawl-s1-x")
    guardian.scratch_gone(tmp_path / "sprawl-s1-x")
    guardian.process_group_gone(4242)
    guardian.gone("sprawl-s1-1")
    assert guardian.close(wait=10) == 0
    lines = out.read_text().splitlines()
    assert [type(parse_message(line)).__name__ for line in lines] == [
        "Expect",
        "Created",
        "PGroup",
        "Scratch",
        "ScratchGone",
        "PGroupGone",
        "Gone",
    ]


def test_the_guardian_has_its_own_session_and_no_write_end(tmp_path: Path) -> None:
    guardian = Guardian("s1", argv=recorder(tmp_path / "out"))
    guardian.expect("x")
    assert guardian.process is not None
    pid = guardian.process.pid
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    # A command started later, even without close_fds, does not inherit our write end
    # (O_CLOEXEC): EOF still reaches the guardian while that command lives.
    later = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        guardian.close(wait=None)
        assert guardian.process.returncode == 0
    finally:
        later.kill()
        later.wait()


def test_a_dead_guardian_degrades_to_nothing_and_is_reported_once(tmp_path: Path) -> None:
    said: list[str] = []
    guardian = Guardian("s1", argv=[sys.executable, "-c", "pass"], on_problem=said.append)
    guardian.expect("a")
    assert guardian.process is not None
    guardian.process.wait()
    for n in range(50):
        guardian.created("a", str(n))  # EPIPE: never raised
    assert len(said) == 1 and "stopped listening" in said[0]
    assert guardian.problem == said[0]
    assert not guardian.alive
    guardian.close()


def test_a_guardian_that_cannot_start_is_reported_once(tmp_path: Path) -> None:
    said: list[str] = []
    guardian = Guardian("s1", argv=[str(tmp_path / "no-such-program")], on_problem=said.append)
    guardian.expect("a")
    guardian.gone("a")
    assert len(said) == 1 and "could not be started" in said[0]
    assert guardian.close() is None


def test_a_stopped_guardian_does_not_stall_the_orchestrator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guardian_client, "WRITE_STALL_SECONDS", 0.2)
    said: list[str] = []
    guardian = Guardian("s1", argv=recorder(tmp_path / "out"), on_problem=said.append)
    guardian.expect("a")
    assert guardian.process is not None
    os.kill(guardian.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        for n in range(2000):  # ~100 KiB: more than a pipe holds
            guardian.expect(f"sprawl-s1-{n:04d}-" + "x" * 30)
        assert time.monotonic() - started < 5
        assert len(said) == 1 and "pipe full" in said[0]
    finally:
        os.kill(guardian.process.pid, signal.SIGCONT)
        guardian.close(wait=10)


def test_a_message_that_cannot_be_sent_is_reported_and_the_link_stays(tmp_path: Path) -> None:
    said: list[str] = []
    out = tmp_path / "out"
    guardian = Guardian("s1", argv=recorder(out), on_problem=said.append)
    guardian.scratch(Path("relative/path"))
    guardian.created("sprawl-s1-1", "")
    guardian.expect("sprawl-s1-2")
    assert len(said) == 2 and "not absolute" in said[0] and "empty field" in said[1]
    assert guardian.problem is None
    assert guardian.close(wait=10) == 0
    assert out.read_text() == "expect sprawl-s1-2\n"


def test_the_real_guardian_exits_at_eof_when_nothing_was_left(tmp_path: Path) -> None:
    """No engines named: the guardian still starts, reads, and exits cleanly at EOF."""
    log = tmp_path / "guardian.log"
    guardian = Guardian("s1", log=log)
    copy = tmp_path / "sprawl-s1-copy"
    copy.mkdir()
    guardian.scratch(copy)
    guardian.scratch_gone(copy)
    assert guardian.close(wait=30) == 0
    assert copy.is_dir()  # taken back before EOF: not the guardian's to delete
    assert '"event": "done"' in log.read_text()


def test_the_real_guardian_deletes_a_copy_left_behind(tmp_path: Path) -> None:
    guardian = Guardian("s1", log=tmp_path / "guardian.log")
    copy = tmp_path / "sprawl-s1-copy"
    (copy / "deep" / "er").mkdir(parents=True)
    (copy / "deep" / "er" / "f").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (copy / "link").symlink_to(outside)  # a planted link is removed, never followed
    guardian.scratch(copy)
    assert guardian.close(wait=30) == 0
    assert not copy.exists()
    assert (outside / "keep").read_text() == "keep"


def test_the_real_guardian_leaves_a_path_not_named_like_a_copy(tmp_path: Path) -> None:
    guardian = Guardian("s1", log=tmp_path / "guardian.log")
    tree = tmp_path / "my-project"
    tree.mkdir()
    guardian.scratch(tree)
    guardian.close(wait=30)
    assert tree.is_dir()
    assert "not a scratch copy name" in (tmp_path / "guardian.log").read_text()


DUMP_ENV = (
    "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'));"
    " sys.stdin.buffer.read()"
)


def test_the_guardian_gets_no_name_of_the_callers_but_what_it_needs(tmp_path: Path) -> None:
    """atksecrets: the guardian inherited the caller's whole environment, a secret's value
    included, and a shared one keeps it for every later call (and in any core dump)."""
    import json

    out = tmp_path / "env.json"
    caller = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/someone",
        "DOCKER_HOST": "unix:///run/x.sock",
        "XDG_RUNTIME_DIR": "/run/user/1000",
        "GH_PAT": "ghp_the-real-value",
        "AWS_SECRET_ACCESS_KEY": "also-secret",
        "LD_PRELOAD": "/tmp/evil.so",
    }
    guardian = Guardian("s1", argv=[sys.executable, "-c", DUMP_ENV, str(out)], environ=caller)
    guardian.expect("sprawl-s1-1")
    assert guardian.close(wait=10) == 0
    seen = json.loads(out.read_text())
    assert seen["DOCKER_HOST"] == "unix:///run/x.sock"
    assert seen["XDG_RUNTIME_DIR"] == "/run/user/1000"
    assert seen["PATH"] == "/usr/bin:/bin"
    leaked = {"GH_PAT", "AWS_SECRET_ACCESS_KEY", "LD_PRELOAD"} & set(seen)
    assert leaked == set()
    assert "ghp_the-real-value" not in out.read_text()
