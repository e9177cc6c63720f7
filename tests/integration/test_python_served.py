"""The python arm through the real `sprawl-orch` program and its exec server (issue 31): the
server holds one runtime process (native_fallbacks/wasi_shared.py) that every later call's
commands are forked from, and each call still starts from a clean guest -- what one call's
guest left (a module attribute, a file in its /tmp, an environment variable, its caller's
environment) is absent from the next call's; a shared runtime killed is replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch.native_fallbacks import wasi_forked
from tests.integration.stopping import stop_whole
from tests.integration.test_python_runtime import guests
from tests.integration.test_python_stuck import gone
from tests.polling import until

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))

pytestmark = pytest.mark.skipif(
    not wasi_forked.usable(), reason="the runtime process needs fork, sessions and pidfds"
)

LEAVE = (
    "import builtins, os, sys\n"
    "sys.left = builtins.left = 'A'\n"
    "open('/tmp/left.txt', 'w').write('A')\n"
    "os.environ['LEFT'] = 'A'\n"
    "print(os.environ.get('TZ'), sorted(os.listdir('/tmp')))\n"
)
FIND = (
    "import builtins, os, sys\n"
    "print(hasattr(sys, 'left'), hasattr(builtins, 'left'), sorted(os.listdir('/tmp')),"
    " os.environ.get('LEFT'), os.environ.get('TZ'))\n"
)


@pytest.fixture
def served(tmp_path: Path, python_state: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "python"\n[state]\ndir = "{python_state}"\n'
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(run_dir), "SPRAWL_EXEC_SERVER_IDLE": "60"}
    env.pop("SPRAWL_EXEC_SERVER", None)
    env.pop("TZ", None)
    try:
        yield tree, env
    finally:
        subprocess.run(
            [PROGRAM, "server", "stop"], env=env, capture_output=True, timeout=60, check=False
        )


def call(tree: Path, env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PROGRAM, "exec", "--json", "-C", str(tree), "--", "python", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert b"exec server is not used" not in done.stderr.encode(), done.stderr
    return done


def result(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    parsed = json.loads(done.stdout)
    assert isinstance(parsed, dict), done.stdout
    return parsed


def server_runtimes(env: dict[str, str]) -> list[psutil.Process]:
    """The runtime processes this test's exec server holds (its children running
    wasi_runtime.py): other sessions' servers on this machine are not ours."""
    (lock,) = Path(env["XDG_RUNTIME_DIR"]).rglob("exec-*.sock.lock")
    server = psutil.Process(int(lock.read_text().split()[0]))
    found = []
    for child in server.children():
        try:
            if any(part.endswith("wasi_runtime.py") for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def shared_runtime(env: dict[str, str], within: float = 30.0) -> psutil.Process:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = [p for p in server_runtimes(env) if p.status() != psutil.STATUS_ZOMBIE]
        if len(found) == 1:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no single runtime held by the server: {server_runtimes(env)}")


def test_calls_share_the_servers_runtime_and_each_starts_clean(
    served: tuple[Path, dict[str, str]],
) -> None:
    tree, env = served
    first = call(tree, env, "pass")  # starts the server; the server then starts a runtime
    assert first.returncode == 0, first.stderr
    runtime = shared_runtime(env)
    # the attacker's call: it leaves what it can in its guest, its caller's TZ passed in
    leave = call(tree, {**env, "TZ": "Leak/A"}, LEAVE)
    assert leave.returncode == 0, leave.stderr
    assert "Leak/A ['left.txt']" in str(result(leave)["stdout"])
    for n in range(2):
        found = call(tree, env, FIND)
        assert found.returncode == 0, found.stderr
        assert str(result(found)["stdout"]).strip() == "False False [] None None"
        # the first after the attacker's (another TZ: another key) starts cold; the second
        # is handed to the guest the runtime pre-started after the first (wasi_prepared.py)
        ran = result(found)["python"]
        assert isinstance(ran, dict) and ran["prepared"] is (n == 1), ran
    # both went through the one runtime the server holds: no restart, no second runtime
    assert shared_runtime(env).pid == runtime.pid
    assert guests(runtime) == []  # each command reaped by its call
    # no call's runtime of its own: they were the server's only
    assert len(server_runtimes(env)) == 1


def test_a_killed_shared_runtime_is_replaced(served: tuple[Path, dict[str, str]]) -> None:
    tree, env = served
    assert call(tree, env, "pass").returncode == 0
    runtime = shared_runtime(env)
    runtime.send_signal(signal.SIGKILL)
    # the server's child: a zombie until the server polls it after the next call
    deadline = time.monotonic() + 10
    while runtime.is_running() and runtime.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, runtime
        time.sleep(0.05)
    again = call(tree, env, "print('again')")
    assert again.returncode == 0, again.stderr
    said = result(again)["python"]
    assert isinstance(said, dict) and "ended" in str(said["runtime_restarted"]), said
    assert str(result(again)["stdout"]).strip() == "again"
    replaced = shared_runtime(env)  # started after that call asked
    assert replaced.pid != runtime.pid
    quiet = call(tree, env, "pass")
    python = result(quiet)["python"]
    assert isinstance(python, dict) and "runtime_restarted" not in python, python
    assert shared_runtime(env).pid == replaced.pid


def test_a_stuck_shared_runtime_is_killed_and_the_next_call_gets_a_fresh_one(
    served: tuple[Path, dict[str, str]],
) -> None:
    # The server's runtime stopped (SIGSTOP): it can never say it is ready. The call that
    # waits on it gives up after wasi_ready.READY_SECONDS (the real 30 s: the server's own
    # bound), kills it through the server's pidfd and says so; the server replaces it.
    tree, env = served
    assert call(tree, env, "pass").returncode == 0
    runtime = shared_runtime(env)
    try:
        # Every thread stopped before the call: a stop still under way let the runtime
        # answer it (clean-clone CI of c80e7e8).
        stop_whole(runtime)
        stuck = call(tree, env, "print('never')")
        assert stuck.returncode != 0
        said = result(stuck)
        assert said["code"] == "E_TOOL_UNAVAILABLE", said
        assert said["subject"] == "python-runtime-stuck", said
        assert f"pid {runtime.pid}" in str(said["detail"]) and "killed" in str(said["detail"])
        # killed by the call, not left stopped; reaped or not (status() of a runtime the
        # server reaped after is_running() raised NoSuchProcess)
        assert until(lambda: gone(runtime), 10, every=0.05), runtime
    finally:
        if runtime.is_running():
            runtime.kill()
    again = call(tree, env, "print('again')")
    assert again.returncode == 0, again.stderr
    assert str(result(again)["stdout"]).strip() == "again"
    assert shared_runtime(env).pid != runtime.pid


def test_each_call_writes_with_its_callers_umask(served: tuple[Path, dict[str, str]]) -> None:
    # The shared runtime is the server's child (umask 077); a file the guest makes in the copy
    # must still get the mode the caller's umask gives, as on every other arm.
    tree, env = served
    modes = []
    for mask, name in ((0o027, "a.txt"), (0o022, "b.txt"), (0o077, "c.txt")):
        done = subprocess.run(
            [
                PROGRAM,
                "exec",
                "--json",
                "-C",
                str(tree),
                "--",
                "python",
                "-c",
                f"open({name!r}, 'w').write('x')",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            preexec_fn=lambda mask=mask: os.umask(mask),
        )
        changes = result(done)["changes"]
        assert isinstance(changes, dict), done.stderr
        modes += [(p["path"], p["mode"]) for p in changes["paths"] if p["path"] == name]
    assert modes == [("a.txt", "0640"), ("b.txt", "0644"), ("c.txt", "0600")]
