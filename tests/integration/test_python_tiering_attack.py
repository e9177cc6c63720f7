"""Attacks on the python arm's tiering (wasi_tiering.py) that test_python_tiering.py does not
try: where the background compile writes, and whether it outlives the state it compiles for.
Real wasmtime, the real module, real processes (the helpers are test_python_tiering.py's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.native_fallbacks import wasi_module, wasi_tiering
from tests.integration.stopping import stop_whole
from tests.integration.test_python_served import PROGRAM, result, served  # noqa: F401
from tests.integration.test_python_tiering import (
    CRANELIFT,
    PASS,
    WINCH,
    adopt,
    compiles,
    flip_a_byte,
    tool_for,
    winch_source,  # noqa: F401  (a fixture)
)


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The caller's cwd, with the tree in it; every background compile started here is
    killed after the test (a running one is ~1 GB)."""
    (tmp_path / "tree").mkdir()
    monkeypatch.chdir(tmp_path)
    before = {p.pid for p in compiles(Path("/"))}
    yield tmp_path
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info["cmdline"] or []
        if proc.pid not in before and "sprawl_orch.native_fallbacks.wasi_tiering" in line:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def compile_state(proc: psutil.Process) -> Path:
    """The state directory a background compile writes into: its STATE argument as it
    resolves in its own working directory."""
    line = proc.cmdline()
    state = line[line.index("sprawl_orch.native_fallbacks.wasi_tiering") + 1]
    return Path(proc.cwd()) / state


def test_a_relative_state_dir_gets_its_compile_in_that_state_not_under_the_root(
    place: Path,
    winch_source: Path,  # noqa: F811
) -> None:
    # `[state] dir = "st"` (a relative path, as a sprawl.toml may say) is the caller's cwd's
    # st/; the compile runs in "/" and, before the fix, compiled into /st/ (root made it),
    # never into the caller's entry: every later command started another 12-CPU-s compile.
    relative = Path(f"st-atkpy-{os.getpid()}")
    (place / relative).mkdir(mode=0o700)
    adopt(winch_source, place / relative, WINCH)
    stray = Path("/") / relative
    try:
        with tool_for(place / "tree", relative) as tool:
            first = tool.exec(PASS)
            assert first.exit_code == 0 and first.python is not None, first
            assert first.python["compiler"] == WINCH
            running = [
                p
                for p in psutil.process_iter(["cmdline"])
                if str(relative) in " ".join(p.info["cmdline"] or [])
                and "sprawl_orch.native_fallbacks.wasi_tiering" in (p.info["cmdline"] or [])
            ]
            assert len(running) == 1, running
            assert compile_state(running[0]) == place / relative
    finally:
        shutil.rmtree(stray, ignore_errors=True)
    assert not stray.exists()
    assert wasi_module.compile_in_progress(wasi_module.entry_dir(place / relative, CRANELIFT))
    assert wasi_tiering.start_background(place / relative) is None  # that one runs


def test_a_finished_background_compile_is_no_zombie_of_the_tool_that_started_it(
    place: Path,
    winch_source: Path,  # noqa: F811
) -> None:
    # An in-process tool (serve, a Session) is the compile's parent: before the fix it was
    # reaped only by the next start_background, which never comes once Cranelift's entry is
    # there, so it stayed a zombie for the tool's life.
    state = place / "state"
    state.mkdir(mode=0o700)
    adopt(winch_source, state, WINCH)
    with tool_for(place / "tree", state) as tool:
        first = tool.exec(PASS)
        assert first.python is not None and first.python["compiler"] == WINCH, first
        (compile_,) = compiles(state)
        assert compile_.ppid() == os.getpid()
        wasi_module.compiled(state)  # waits on its lock: it has written the entry
        deadline = time.monotonic() + 60  # exited: a zombie (never waited on here)
        while compile_.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.1)
        later = tool.exec(PASS)
        assert later.python is not None and later.python["compiler"] == CRANELIFT, later
        with contextlib.suppress(psutil.NoSuchProcess):
            assert compile_.status() != psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("removed", ["state", "entry"])
def test_a_compile_whose_state_or_entry_is_removed_stops(place: Path, removed: str) -> None:
    # The refusal of a tampered entry says "remove <entry>; the next command compiles it
    # afresh", and a person may delete the whole state. Before the fix the compile went on
    # (~10 more CPU s, ~1 GB) for nothing while the next command's lock -- a new file --
    # was free: a second compile at once, the first renaming its module into the new entry.
    state = place / "state"
    state.mkdir(mode=0o700)
    pid = wasi_tiering.start_background(state)
    assert pid is not None
    proc = psutil.Process(pid)
    deadline = time.monotonic() + 120
    while sum(proc.cpu_times()[:2]) < 1.0 and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        stop_whole(proc)  # the rest of the compile is still to do; no thread runs on
        done = sum(proc.cpu_times()[:2])
        assert wasi_module.cached(state, CRANELIFT) is None
        shutil.rmtree(state if removed == "state" else wasi_module.entry_dir(state, CRANELIFT))
    finally:
        proc.send_signal(signal.SIGCONT)
    _, _, usage = os.wait4(pid, 0)
    # What it spent after the removal: the rest of a compile (~10 CPU s) before the fix.
    assert usage.ru_utime + usage.ru_stime - done < 4.0


def test_a_relative_state_dir_through_the_exec_server_stays_the_callers(
    served: tuple[Path, dict[str, str]],  # noqa: F811
    python_state: Path,
) -> None:
    # The server runs in "/" and chdirs each call to its caller's cwd: a relative state must
    # never become the server's /<relative> (held when tried: the call uses its own).
    tree, env = served
    relative = f"st-served-{os.getpid()}"
    (tree / "sprawl.toml").write_text(f'[sandbox]\narm = "python"\n[state]\ndir = "{relative}"\n')
    place = tree.parent
    (place / relative).mkdir(mode=0o700)
    adopt(python_state, place / relative, CRANELIFT)
    stray = Path("/") / relative
    try:
        for _ in range(2):  # the second is answered after the server's after_call of the first
            done = subprocess.run(
                [PROGRAM, "exec", "--json", "--", "python", "-c", "print('ran')"],
                cwd=place,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
            assert "exec server is not used" not in done.stderr, done.stderr
            got = result(done)
            assert got["exit_code"] == 0 and got["stdout"] == "ran\n", got
        assert not stray.exists()
    finally:
        shutil.rmtree(stray, ignore_errors=True)


def test_a_refused_entry_removed_as_the_refusal_says_lets_the_same_tool_run_again(
    place: Path,
    winch_source: Path,  # noqa: F811
) -> None:
    # The refusal says "remove <entry>; the next command compiles it afresh". Before the fix
    # a tool that had loaded the entry (serve, a Session) kept it: its next command raised a
    # bare FileNotFoundError out of exec(), and every one after, for the tool's life.
    state = place / "state"
    state.mkdir(mode=0o700)
    adopt(winch_source, state, WINCH)
    entry = adopt(winch_source, state, CRANELIFT)
    with tool_for(place / "tree", state) as tool:
        first = tool.exec(PASS)
        assert first.python is not None and first.python["compiler"] == CRANELIFT, first
        flip_a_byte(entry / "module.cwasm")
        refused = tool.exec(PASS)
        assert refused.code is ErrorCode.SANDBOX_DENIED, refused
        assert str(entry) in (refused.recovery or ""), refused
        shutil.rmtree(entry)
        again = tool.exec(PASS)
        assert again.exit_code == 0 and again.stdout == "ran\n", again
        assert again.python is not None and again.python["compiler"] == WINCH
    assert len(compiles(state)) == 1  # Cranelift's compiled afresh, in the background


def test_the_callers_environment_and_cwd_do_not_reach_the_background_compile(
    place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held when tried: a caller whose cwd is a tree with a planted sprawl_orch/ package,
    # sitecustomize.py and wasmtime.py, PYTHONPATH/PYTHONHOME/PYTHONSTARTUP/LD_PRELOAD/HOME/
    # XDG_* pointing into it: the compile has none of them, runs in "/", imports none.
    plant = place / "tree"
    (plant / "sprawl_orch" / "native_fallbacks").mkdir(parents=True)
    for name in ("sitecustomize.py", "usercustomize.py", "wasmtime.py", "sprawl_orch/__init__.py"):
        (plant / name).write_text("open(__file__ + '.ran', 'w')\n")
    (plant / "sprawl_orch" / "native_fallbacks" / "__init__.py").write_text("")
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, str(plant))
    monkeypatch.setenv("LD_PRELOAD", str(plant / "missing.so"))
    monkeypatch.chdir(plant)
    state = place / "state"
    state.mkdir(mode=0o700)
    pid = wasi_tiering.start_background(state)
    assert pid is not None
    proc = psutil.Process(pid)
    deadline = time.monotonic() + 120  # past its imports: compiling
    while sum(proc.cpu_times()[:2]) < 1.5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.environ() == {} and proc.cwd() == "/"
    proc.kill()
    os.waitpid(pid, 0)
    assert not list(plant.rglob("*.ran"))
    log = state / "wasm-runtime" / wasi_tiering.LOG
    assert "missing.so" not in log.read_text()
