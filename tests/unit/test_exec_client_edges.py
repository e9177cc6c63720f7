"""The thin exec client and its server (issue 26) at the edges of a caller's process, by the
real program on copied_tree (atkspare, 2026-12-03):

- a caller whose working directory was deleted runs as it does in-process (the client's
  os.getcwd() raised: a traceback, status 1);
- a caller whose `sprawl_orch` comes from PYTHONPATH is served by that code, not the
  installed one (the server was started without it: its socket named the caller's code, its
  calls ran the installed code);
- a call still running after its server was SIGKILLed does not hold the server's start lock
  (every new server lost its start to it: each caller waited 10 s, then ran in-process);
- a niced, CPU-pinned, SCHED_BATCH, OOM-first caller's command runs so, as in-process (the
  server's own were used);
- a signal the caller ignores (nohup's SIGHUP, a background job's SIGINT) is not forwarded;
- a `setarch -R` caller's command runs without address randomization, as in-process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

import sprawl_orch
from tests.unit.test_exec_client import PROGRAM, env, program, tree

__all__ = ["env", "tree"]  # the fixtures, shared with test_exec_client


def test_a_deleted_working_directory_runs_as_in_process(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    gone = tmp_path / "gone"
    places = [str(gone), PROGRAM, str(tree)]
    runs = {}
    for served in ("1", "0"):
        gone.mkdir()
        runs[served] = subprocess.run(
            ["sh", "-c", 'rmdir "$1" && exec "$2" exec -C "$3" -- echo hi', "-", *places],
            cwd=gone,
            env={**env, "SPRAWL_EXEC_SERVER": served},
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert (runs["0"].returncode, runs["0"].stdout) == (0, b"hi\n"), runs["0"].stderr
    assert (runs["1"].returncode, runs["1"].stdout) == (0, b"hi\n"), runs["1"].stderr
    assert b"Traceback" not in runs["1"].stderr


def test_a_package_from_pythonpath_is_the_code_that_serves(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The code stamp names the caller's code; the server must run that code."""
    alt = tmp_path / "alt" / "sprawl_orch"
    shutil.copytree(
        Path(sprawl_orch.__file__).parent, alt, ignore=shutil.ignore_patterns("__pycache__")
    )
    said = alt / "core" / "assurances.py"
    text = said.read_text()
    assert 'f"Runs under {arm}: "' in text
    said.write_text(text.replace('f"Runs under {arm}: "', 'f"ALT-CODE runs under {arm}: "'))
    moved = {**env, "PYTHONPATH": str(alt.parent)}
    for _ in range(2):  # the server's start, then a call it serves (its spare)
        done = program(["exec", "-C", str(tree), "--", "true"], moved)
        assert done.returncode == 0, done.stderr[-2000:]
        assert b"ALT-CODE runs under copied_tree" in done.stderr, done.stderr[-2000:]
        assert b"exec server is not used" not in done.stderr
    # and the installed code's callers are not served by it
    plain = program(["exec", "-C", str(tree), "--", "true"], env)
    assert b"ALT-CODE" not in plain.stderr
    program(["server", "stop"], env)


def test_a_killed_server_s_running_call_does_not_keep_the_next_server_from_starting(
    tree: Path, env: dict[str, str]
) -> None:
    """A call outlives its SIGKILLed server (test_exec_client); the server's start lock is not
    the call's to hold: while it did, every new server lost its start "race" and each caller
    waited START_SECONDS for a socket that never came, then ran in-process."""
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0
    listed = program(["server", "status"], env).stdout
    server = int(listed.split(b"pid ")[1].split()[0])
    long = subprocess.Popen(
        [PROGRAM, "exec", "-C", str(tree), "--", "sleep", "60"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p.name() == "sleep" for p in psutil.Process(server).children(True)):
            assert time.monotonic() < deadline, "the long call never started"
            time.sleep(0.05)
        os.kill(server, signal.SIGKILL)
        done = program(["exec", "-C", str(tree), "--", "echo", "hi"], env)
        assert (done.returncode, done.stdout) == (0, b"hi\n"), done.stderr[-2000:]
        assert b"exec server is not used" not in done.stderr, done.stderr[-2000:]
    finally:
        long.kill()
        long.wait(timeout=60)
        program(["server", "stop"], env)


SETTINGS: dict[str, Callable[[], object]] = {
    "nice": lambda: os.nice(5),
    "affinity": lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    "batch": lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)),
    "oom": lambda: Path("/proc/self/oom_score_adj").write_text("700"),  # raising: no privilege
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_a_niced_pinned_batch_or_oom_first_caller_s_command_runs_as_in_process(
    setting: str, tree: Path, env: dict[str, str]
) -> None:
    """Niceness, CPU affinity, scheduling policy and OOM score are the caller's, as its
    rlimits: a server (started by a normal caller) ran a `nice -n 5`, `taskset -c 0`,
    `chrt -b` or `choom -n 700` caller's command with the server's own."""
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0  # a server
    shown = (
        "nice; grep ^Cpus_allowed_list /proc/$$/status; cut -d' ' -f41 /proc/$$/stat;"
        " cat /proc/$$/oom_score_adj"
    )
    runs = {}
    for served in ("1", "0"):
        runs[served] = subprocess.run(
            [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", shown],
            env={**env, "SPRAWL_EXEC_SERVER": served},
            preexec_fn=SETTINGS[setting],  # the caller sets its own before it runs
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert runs["0"].returncode == 0, runs["0"].stderr[-2000:]
    assert (runs["1"].returncode, runs["1"].stdout) == (0, runs["0"].stdout), runs["1"].stderr
    assert b"exec server is not used" not in runs["1"].stderr  # served, by a server of its own
    program(["server", "stop"], env)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_a_signal_the_caller_ignores_is_not_forwarded(
    sig: signal.Signals, tree: Path, env: dict[str, str]
) -> None:
    """`nohup sprawl-orch exec ...` (SIGHUP ignored) and a script's `sprawl-orch exec ... &`
    (SIGINT ignored): in-process the call survives the signal; the client installed its
    forwarder over the ignoring, and the served call was killed by it."""
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0  # a server
    for served in ("1", "0"):
        caller = subprocess.Popen(
            [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", "sleep 2; echo survived"],
            env={**env, "SPRAWL_EXEC_SERVER": served},
            preexec_fn=lambda: signal.signal(sig, signal.SIG_IGN),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # the client is started and waits on its call
        caller.send_signal(sig)
        out, err = caller.communicate(timeout=120)
        assert (caller.returncode, out) == (0, b"survived\n"), (served, err[-2000:])
    program(["server", "stop"], env)


def _no_randomize() -> None:
    """`setarch -R`: the caller's personality, inherited by what it runs."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.personality(0x0040000) != -1  # ADDR_NO_RANDOMIZE


def test_a_caller_s_personality_is_its_command_s(tree: Path, env: dict[str, str]) -> None:
    """A `setarch -R` caller (no address randomization, for a reproducible debug run): its
    command ran with the server's personality, randomized."""
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0  # a server
    shown = ["exec", "-C", str(tree), "--", "sh", "-c", "cat /proc/$$/personality"]
    runs = {}
    for served in ("1", "0"):
        runs[served] = subprocess.run(
            [PROGRAM, *shown],
            env={**env, "SPRAWL_EXEC_SERVER": served},
            preexec_fn=_no_randomize,
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert (runs["0"].returncode, runs["0"].stdout) == (0, b"00040000\n"), runs["0"].stderr
    assert (runs["1"].returncode, runs["1"].stdout) == (0, b"00040000\n"), runs["1"].stderr
    assert b"exec server is not used" not in runs["1"].stderr
    program(["server", "stop"], env)
