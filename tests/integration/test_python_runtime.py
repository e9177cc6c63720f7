"""The python arm's runtime process (native_fallbacks/wasi_runtime.py, wasi_forked.py), for
real: one per tool loads the module once and forks each command. These show that a command
still is a process of its own that shares nothing with the next, that a runtime killed between
commands is replaced and the result says so, that a crash or a trap leaves no process, and that
the limits still reach the result as themselves.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch import ExecResult, ExecTool
from sprawl_orch.native_fallbacks import wasi_forked, wasi_prepared
from tests.integration.test_python_arm import state, tool_for, tree

__all__ = ["state", "tree"]  # test_python_arm.py's fixtures, used here by name

pytestmark = pytest.mark.skipif(
    not wasi_forked.usable(), reason="the runtime process needs fork, sessions and pidfds"
)


@pytest.fixture
def tool(tree: Path, state: Path) -> Iterator[ExecTool]:
    with tool_for(tree, state) as t:
        yield t


def runtimes() -> list[psutil.Process]:
    """This test process's runtime processes (children running wasi_runtime.py)."""
    found = []
    for child in psutil.Process().children():
        try:
            if any(part.endswith("wasi_runtime.py") for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def guests(runtime: psutil.Process) -> list[psutil.Process]:
    """The runtime's command processes: not its pre-started guest (wasi_prepared.py), which
    waits for the next command under its own name."""
    found = []
    for child in runtime.children():
        # The next guest is forked as the runtime's copy and names itself a moment later
        # (wasi_prepared._name): seen in between it is `python` (the clean-clone CI caught one
        # so, 2026-12-03). A command left behind stays; a guest being prepared renames itself.
        deadline = time.monotonic() + 2.0
        try:
            while child.name() != wasi_prepared.PREPARED_NAME.decode():
                if time.monotonic() > deadline:
                    found.append(child)
                    break
                time.sleep(0.02)
        except psutil.NoSuchProcess:
            continue
    return found


def prepared_guest(runtime: psutil.Process, within: float = 30.0) -> psutil.Process:
    """The runtime's one pre-started guest (forked once the last command was reaped)."""
    name = wasi_prepared.PREPARED_NAME.decode()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = [c for c in runtime.children() if c.name() == name]
        if found:
            (one,) = found
            return one
        time.sleep(0.05)
    raise AssertionError(f"no prepared guest under {runtime.pid}: {runtime.children()}")


def the_runtime() -> psutil.Process:
    (runtime,) = runtimes()
    return runtime


def harvested(tool: ExecTool, handle: str, within: float = 30.0) -> ExecResult:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for result in tool.harvest():
            if result.handle == handle:
                return result
        time.sleep(0.05)
    raise AssertionError(f"{handle} did not end within {within} s")


def test_two_commands_share_nothing(tool: ExecTool) -> None:
    first = (
        "import builtins, json\n"
        "open('/tmp/left', 'w').write('x')\n"
        "json.MARK = 'first'\n"
        "builtins.len = lambda _: -1\n"
        "print(len('abc'), json.MARK, sorted(__import__('os').listdir('/tmp')))"
    )
    ran = tool.exec(["python", "-c", first])
    assert ran.stdout.split() == ["-1", "first", "['left']"], ran.stderr
    second = (
        "import builtins, json, os\n"
        "print(len('abc'), getattr(json, 'MARK', None), os.listdir('/tmp'))"
    )
    after = tool.exec(["python", "-c", second])
    assert after.stdout.split() == ["3", "None", "[]"], after.stderr


def test_each_command_is_its_own_process_in_its_own_session(tool: ExecTool) -> None:
    result = tool.exec(["python", "-c", "while True: pass"], window=0.5)
    assert result.outcome == "backgrounded" and result.handle is not None
    runtime = the_runtime()
    assert runtime.ppid() == os.getpid()
    (guest,) = guests(runtime)
    assert os.getpgid(guest.pid) == guest.pid and os.getsid(guest.pid) == guest.pid
    assert tool.halt(result.handle).exit_code == 137
    other = tool.exec(["python", "-c", "while True: pass"], window=0.5)
    assert other.handle is not None
    (second,) = guests(runtime)
    assert second.pid != guest.pid
    tool.halt(other.handle)
    assert guests(runtime) == []  # halted and reaped: not even a zombie


def test_a_killed_runtime_is_replaced_and_said(tool: ExecTool) -> None:
    assert tool.exec(["python", "-c", "pass"]).exit_code == 0
    old = the_runtime()
    old.send_signal(signal.SIGKILL)
    old.wait(10)
    result = tool.exec(["python", "-c", "print('again')"])
    assert result.stdout.strip() == "again", result.stderr
    assert result.python is not None
    said = result.python["runtime_restarted"]
    assert f"pid {old.pid}" in said and "had ended" in said
    assert the_runtime().pid != old.pid
    quiet = tool.exec(["python", "-c", "pass"])
    assert quiet.python is not None and "runtime_restarted" not in quiet.python


def test_a_changed_cache_file_is_checked_again_by_a_new_runtime(
    tree: Path, state: Path, tmp_path: Path
) -> None:
    own = tmp_path / "own-state"
    own.mkdir(mode=0o700)
    shutil.copytree(state / "wasm-cache", own / "wasm-cache")
    (module,) = (own / "wasm-cache").glob("*/module.cwasm")
    with tool_for(tree, own) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        first = the_runtime().pid
        # the same bytes in a new inode: verified again, then loaded by a new runtime
        shutil.copy2(module, module.with_suffix(".new"))
        os.replace(module.with_suffix(".new"), module)
        result = tool.exec(["python", "-c", "print('ok')"])
        assert result.stdout.strip() == "ok", result.stderr
        assert result.python is not None
        assert "changed" in result.python["runtime_restarted"]
        assert the_runtime().pid != first


def test_a_crash_mid_command_leaves_no_process(tool: ExecTool) -> None:
    result = tool.exec(["python", "-c", "while True: pass"], window=0.5)
    assert result.handle is not None
    runtime = the_runtime()
    (guest,) = guests(runtime)
    # As a crash of wasmtime itself ends it (a Rust panic aborts). Not SIGSEGV: wasmtime's
    # handler takes one that lands while wasm code runs for a guest's own memory fault.
    guest.send_signal(signal.SIGABRT)
    crashed = harvested(tool, result.handle)
    assert crashed.exit_code == 128 + signal.SIGABRT
    assert crashed.python is not None and "runtime_failed" in crashed.python
    assert not psutil.pid_exists(guest.pid)
    assert guests(runtime) == []
    assert tool.exec(["python", "-c", "pass"]).exit_code == 0  # the runtime lives on


def test_a_trap_leaves_no_process(tool: ExecTool) -> None:
    code = "import sys\nsys.setrecursionlimit(10**7)\ndef f(n): return f(n + 1)\nf(0)"
    result = tool.exec(["python", "-c", code])
    assert result.exit_code not in (0, None)
    assert result.python is not None and "runtime_failed" not in result.python
    assert guests(the_runtime()) == []


def test_limits_reach_the_result_through_one_runtime(tree: Path, state: Path) -> None:
    # Fuel far below what the wall allows: 2e9 fuel and 2 s ended in "time" before "fuel"
    # once at load 19 (the guest runs ~1e9 instructions a second on a quiet core).
    limits = {"fuel": 500_000_000, "memory_bytes": 64 * 1024 * 1024, "wall_seconds": 30}
    with tool_for(tree, state, limits) as tool:
        fuel = tool.exec(["python", "-c", "while True: pass"])
        runtime = the_runtime()
        memory = tool.exec(["python", "-c", "a = []\nwhile True: a.append(' ' * 10**6)"])
        sleep = tool.exec(["python", "-c", "import time; time.sleep(3600)"])
        after = tool.exec(["python", "-c", "print('fine')"])
        assert the_runtime().pid == runtime.pid
        assert guests(runtime) == []
    assert fuel.limits_hit == ["fuel"] and fuel.exit_code == 137
    assert fuel.python is not None and "fuel" in fuel.python["trap"]
    assert memory.limits_hit == ["memory"], memory.stderr
    assert sleep.limits_hit == ["time"] and sleep.exit_code == 137
    assert after.stdout.strip() == "fine" and after.limits_hit == []


def test_the_runtime_ends_with_the_tool(tree: Path, state: Path) -> None:
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        runtime = the_runtime()
    runtime.wait(10)
    assert runtime.pid not in [p.pid for p in runtimes()]


def test_without_fork_each_command_is_a_fresh_python(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the path of macOS and Windows (no pidfd, no fork): wasi_guest.py run by path per command
    monkeypatch.setattr(wasi_forked, "usable", lambda: False)
    with tool_for(tree, state, {"fuel": 2_000_000_000}) as tool:
        ran = tool.exec(["python", "-c", "print('alone')"])
        assert runtimes() == []
        fuel = tool.exec(["python", "-c", "while True: pass"])
    assert ran.stdout.strip() == "alone", ran.stderr
    assert fuel.limits_hit == ["fuel"] and fuel.exit_code == 137
