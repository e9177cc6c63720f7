"""Tiering of the python arm's module for real (wasi_tiering.py): the first command of a binary
runs on a Winch-compiled entry and starts one background Cranelift compile; later commands move
to the Cranelift entry once it exists. Real wasmtime, the real 26 MB module, real processes.

States of their own (never the session's python_state, whose Cranelift entry exists): an
empty one where the test is about the first command, else a copy of the entries a test needs.
A test that must stay on Winch holds the Cranelift entry's compile lock itself, as a running
background compile does, so no compile starts under it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch import Config, ExecTool
from sprawl_orch.core import served_memo
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.core.private import private_file
from sprawl_orch.native_fallbacks import wasi_forked, wasi_module, wasi_shared, wasi_tiering
from tests.integration.stopping import stop_whole

WINCH, CRANELIFT = wasi_tiering.QUICK, wasi_tiering.OPTIMIZED
PASS = ["python", "-c", "print('ran')"]


def tool_for(tree: Path, state: Path, python: dict[str, object] | None = None) -> ExecTool:
    config = Config(sandbox={"arm": "python", "python": python or {}}, state={"dir": str(state)})
    return ExecTool(config, tree)


def compiles(state: Path) -> list[psutil.Process]:
    """The background compiles running for `state` (by their command line)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info["cmdline"] or []
        if "sprawl_orch.native_fallbacks.wasi_tiering" in line and str(state) in line:
            found.append(proc)
    return found


@contextlib.contextmanager
def compile_lock_held(state: Path) -> Iterator[None]:
    """As a running background compile holds it: no command starts another."""
    entry = wasi_module.entry_dir(state, CRANELIFT)
    fd = private_file(entry / wasi_module.LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def adopt(source: Path, state: Path, compiler: str) -> Path:
    """`source`'s entry of `compiler` copied into `state` (a compile costs seconds)."""
    entry = wasi_module.entry_dir(source, compiler)
    into = wasi_module.entry_dir(state, compiler)
    for name in ("module.cwasm", "module.sha256"):
        shutil.copy2(entry / name, into / name)
    return into


def flip_a_byte(module: Path) -> None:
    with module.open("r+b") as f:
        f.seek(module.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    return root


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    yield state
    for proc in compiles(state):  # a test that failed midway: its compile is not left running
        with contextlib.suppress(psutil.Error):
            proc.kill()


@pytest.fixture(scope="module")
def winch_source(tmp_path_factory: pytest.TempPathFactory, python_state: Path) -> Path:
    """A state holding a Winch entry (compiled once here) and python_state's Cranelift one."""
    state = tmp_path_factory.mktemp("winch")
    wasi_module.compiled(state, compiler=WINCH)
    adopt(python_state, state, CRANELIFT)
    return state


def test_first_command_runs_on_winch_starts_one_compile_then_moves_to_cranelift(
    tree: Path, fresh: Path
) -> None:
    with tool_for(tree, fresh) as tool:
        first = tool.exec(PASS)
        assert first.exit_code == 0 and first.stdout.strip() == "ran", first
        assert first.python is not None and first.python["compiler"] == WINCH
        assert wasi_module.cached(fresh, WINCH) is not None
        (compile_,) = compiles(fresh)
        # Stopped where it is: the next command must find it running, whatever the load.
        try:
            stop_whole(compile_)  # inside: one that times out is still continued below
            second = tool.exec(PASS)
            with tool_for(tree, fresh) as other:  # another tool, as another CLI call
                third = other.exec(PASS)
            assert [c.pid for c in compiles(fresh)] == [compile_.pid]  # no second compile
        finally:
            compile_.send_signal(signal.SIGCONT)
        for result in (second, third):
            assert result.exit_code == 0 and result.python is not None, result
            assert result.python["compiler"] == WINCH
        assert wasi_module.cached(fresh, CRANELIFT) is None
        # Waits on the compile's lock, then maps what it wrote (no compile of its own).
        optimized = wasi_module.compiled(fresh)
        assert compile_.wait(timeout=60) == 0
        later = tool.exec(PASS)  # the same tool moves to it
    assert later.exit_code == 0 and later.python is not None, later
    assert later.python["compiler"] == CRANELIFT
    assert hashlib.sha256(optimized.path.read_bytes()).hexdigest() == optimized.sha256
    assert stat_mode(optimized.path.parent) == 0o700 and stat_mode(optimized.path) & 0o077 == 0
    with tool_for(tree, fresh) as tool:
        again = tool.exec(PASS)
    assert again.python is not None and again.python["compiler"] == CRANELIFT
    assert compiles(fresh) == []


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_killed_background_compile_leaves_nothing_that_loads_and_is_restarted(
    tree: Path, fresh: Path, winch_source: Path
) -> None:
    adopt(winch_source, fresh, WINCH)
    entry = wasi_module.entry_dir(fresh, CRANELIFT)
    # What a compile killed between its temp file and its rename leaves, and a module whose
    # record never came: neither is an entry, and the next compile clears the temp file.
    (entry / ".module.cwasm-torn").write_bytes(b"half")
    (entry / "module.cwasm").write_bytes(b"no record names these bytes")
    with tool_for(tree, fresh) as tool:
        first = tool.exec(PASS)
        assert first.python is not None and first.python["compiler"] == WINCH, first
        (compile_,) = compiles(fresh)
        # midway: it has compiled for a while (its CPU), not written its entry yet
        deadline = time.monotonic() + 120
        while sum(compile_.cpu_times()[:2]) < 1.0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert wasi_module.cached(fresh, CRANELIFT) is None
        compile_.kill()
        compile_.wait(timeout=30)
        assert wasi_module.cached(fresh, CRANELIFT) is None
        assert not wasi_module.compile_in_progress(entry)  # its lock went with it
        second = tool.exec(PASS)
        assert second.exit_code == 0 and second.python is not None, second
        assert second.python["compiler"] == WINCH
        (restarted,) = compiles(fresh)
        assert restarted.pid != compile_.pid
        assert wasi_module.compiled(fresh).compiler == CRANELIFT  # waited for it
    assert not list(entry.glob(".module.*"))
    assert wasi_module.open_verified(wasi_module.cached(fresh) or pytest.fail()) >= 0


@pytest.mark.parametrize("compiler", [WINCH, CRANELIFT])
def test_a_tampered_entry_is_refused_naming_both_hashes(
    tree: Path, fresh: Path, winch_source: Path, compiler: str
) -> None:
    entry = adopt(winch_source, fresh, compiler)
    recorded = (entry / "module.sha256").read_text().strip()
    flip_a_byte(entry / "module.cwasm")
    now = hashlib.sha256((entry / "module.cwasm").read_bytes()).hexdigest()
    with compile_lock_held(fresh), tool_for(tree, fresh) as tool:
        result = tool.exec(PASS)
    assert result.code is ErrorCode.SANDBOX_DENIED, result
    assert "failed its check" in (result.detail or "")
    assert now in (result.detail or "") and recorded in (result.detail or "")
    assert "ran" not in (result.stdout or "")
    assert compiles(fresh) == []


def test_fuel_memory_and_wall_time_reach_the_result_as_themselves_on_winch(
    tree: Path, fresh: Path, winch_source: Path
) -> None:
    adopt(winch_source, fresh, WINCH)
    limits = {"fuel": 300_000_000, "memory_bytes": 64 * 1024 * 1024, "wall_seconds": 2}
    bomb = "a = []\nwhile True: a.append(' ' * 10**6)"
    with compile_lock_held(fresh), tool_for(tree, fresh, limits) as tool:
        fuel = tool.exec(["python", "-c", "while True: pass"])
        memory = tool.exec(["python", "-c", bomb])
    for result in (fuel, memory):
        assert result.python is not None and result.python["compiler"] == WINCH, result
    assert fuel.limits_hit == ["fuel"] and fuel.exit_code == 137, fuel
    assert "fuel" in fuel.python["trap"]  # type: ignore[index]
    assert memory.limits_hit == ["memory"], memory.stderr
    assert memory.python["memory_bytes_at_end"] <= 64 * 1024 * 1024  # type: ignore[index]
    with compile_lock_held(fresh), tool_for(tree, fresh, {"wall_seconds": 1}) as tool:
        wall = tool.exec(["python", "-c", "while True: pass"])
    assert wall.limits_hit == ["time"], wall
    assert wall.python is not None and wall.python["compiler"] == WINCH


def test_a_winch_runtimes_prepared_guest_never_runs_a_cranelift_command(
    tree: Path, fresh: Path, winch_source: Path
) -> None:
    adopt(winch_source, fresh, WINCH)
    with tool_for(tree, fresh) as tool:
        with compile_lock_held(fresh):
            cold = tool.exec(PASS)
            warm = tool.exec(PASS)  # handed to the guest the Winch runtime pre-started
        assert [r.python and r.python["compiler"] for r in (cold, warm)] == [WINCH, WINCH]
        assert warm.python is not None and warm.python["prepared"] is True, warm
        adopt(winch_source, fresh, CRANELIFT)  # the background compile's entry appears
        moved = tool.exec(PASS)
        next_ = tool.exec(PASS)
    # The report's compiler is the engine's that ran the guest, not what the arm expected.
    assert moved.python is not None and moved.python["compiler"] == CRANELIFT, moved
    assert moved.python["prepared"] is False  # the Winch runtime's guest was not handed it
    assert next_.python is not None and next_.python["compiler"] == CRANELIFT
    assert next_.python["prepared"] is True  # now the Cranelift runtime's own


def test_the_exec_servers_shared_runtime_moves_to_cranelift(
    tree: Path, fresh: Path, winch_source: Path
) -> None:
    """Driven in-process as the exec server drives it (test_python_stuck.py does the same)."""
    adopt(winch_source, fresh, WINCH)
    served_memo.take(wasi_shared.KIND)  # asks other tests left in this process
    try:
        with compile_lock_held(fresh):
            wasi_shared.want(fresh)
            wasi_shared.after_call()
            held = wasi_shared._held[str(fresh)]
            assert held.module.entry.compiler == WINCH
            with tool_for(tree, fresh) as tool:  # a served call: it finds the held runtime
                on_winch = tool.exec(PASS)
            assert on_winch.python is not None and on_winch.python["compiler"] == WINCH
        adopt(winch_source, fresh, CRANELIFT)
        with tool_for(tree, fresh) as tool:  # not the held runtime's entry: a runtime of its own
            own = tool.exec(PASS)
        assert own.python is not None and own.python["compiler"] == CRANELIFT, own
        wasi_shared.after_call()  # the server, after that call: replaced
        moved = wasi_shared._held[str(fresh)]
        assert moved.module.entry.compiler == CRANELIFT and moved.proc.pid != held.proc.pid
        with tool_for(tree, fresh) as tool:
            shared = tool.exec(PASS)
        assert shared.python is not None and shared.python["compiler"] == CRANELIFT
        assert wasi_shared._held[str(fresh)].proc.pid == moved.proc.pid
    finally:
        wasi_shared.close_all()


def test_without_fork_the_per_command_runtime_makes_a_winch_engine_too(
    tree: Path, fresh: Path, winch_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no fork a Python per command loads the module (wasi_guest.py by path):
    the spec names the compiler its engine needs."""
    monkeypatch.setattr(wasi_forked, "usable", lambda: False)
    adopt(winch_source, fresh, WINCH)
    with compile_lock_held(fresh), tool_for(tree, fresh, {"fuel": 300_000_000}) as tool:
        ran = tool.exec(PASS)
        spun = tool.exec(["python", "-c", "while True: pass"])
    assert ran.stdout.strip() == "ran" and ran.python is not None, ran
    assert ran.python["compiler"] == WINCH
    assert spun.limits_hit == ["fuel"] and spun.exit_code == 137, spun
    assert spun.python is not None and spun.python["compiler"] == WINCH


def test_a_command_starting_on_winch_while_another_moves_to_cranelift_still_runs(
    tree: Path, fresh: Path, winch_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve runs one tool's commands from many threads: the Winch runtime is retired under
    them only once none is starting on it (a closed runtime refuses to fork). One command is
    held just before its fork (the real fork, only later) while another moves the tool to
    Cranelift's entry; then it is let go."""
    adopt(winch_source, fresh, WINCH)
    real = wasi_forked.ForkedGuest.__init__
    arrived, go = threading.Event(), threading.Event()

    def held_fork(self: wasi_forked.ForkedGuest, runtime: object, *args: object) -> None:
        if threading.current_thread().name == "held":
            arrived.set()
            go.wait(timeout=300)
        real(self, runtime, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(wasi_forked.ForkedGuest, "__init__", held_fork)
    results = []
    with tool_for(tree, fresh) as tool:
        with compile_lock_held(fresh):
            assert tool.exec(PASS).exit_code == 0
            thread = threading.Thread(target=lambda: results.append(tool.exec(PASS)), name="held")
            thread.start()
            assert arrived.wait(timeout=300)
        adopt(winch_source, fresh, CRANELIFT)
        moved = tool.exec(PASS)  # retires the Winch runtime the held command is starting on
        go.set()
        thread.join(timeout=300)
        last = tool.exec(PASS)
    assert moved.python is not None and moved.python["compiler"] == CRANELIFT, moved
    (held,) = results
    assert held.exit_code == 0 and held.stdout.strip() == "ran", held
    assert held.python is not None and held.python["compiler"] == WINCH
    assert last.python is not None and last.python["compiler"] == CRANELIFT
