"""Pre-started guests (native_fallbacks/wasi_prepared.py), for real: after a command the
runtime starts the next guest of the same key up to a blocking read of its command. These show
that the command handed to it starts as clean as a cold one, that a replaced copy or another
environment means a cold start, that one never used is killed, reaped and its /tmp removed,
and that fuel still ends the command, at the configured fuel plus the stated allowance.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import psutil
import pytest

from sprawl_orch.native_fallbacks import wasi_forked, wasi_prepared
from tests.integration.stopping import stop_whole
from tests.integration.test_python_arm import state, tool_for, tree
from tests.integration.test_python_runtime import prepared_guest, the_runtime

__all__ = ["state", "tree"]  # test_python_arm.py's fixtures, used here by name

pytestmark = pytest.mark.skipif(
    not wasi_forked.usable(), reason="the runtime process needs fork, sessions and pidfds"
)

NAME = wasi_prepared.PREPARED_NAME.decode()


def prepared_dirs(state: Path) -> list[str]:
    return sorted(os.listdir(state / "wasm-runtime" / "prepared"))


def copy_root(guest: psutil.Process, state: Path) -> Path:
    """The copy the prepared guest holds open (the directory it preopened)."""
    for fd in os.listdir(f"/proc/{guest.pid}/fd"):
        target = os.readlink(f"/proc/{guest.pid}/fd/{fd}")
        if target.startswith(str(state / "copies")):
            return Path(target)
    raise AssertionError(f"pid {guest.pid} holds no copy")


FIRST = (
    "import builtins, json, sys\n"
    "open('/tmp/left', 'w').write('x')\n"
    "json.MARK = builtins.MARK = sys.MARK = 'first'\n"
    "print(sorted(__import__('os').listdir('/tmp')))"
)
SECOND = (
    "import builtins, json, os, sys\n"
    "print(getattr(json, 'MARK', None), getattr(builtins, 'MARK', None),"
    " getattr(sys, 'MARK', None), os.listdir('/tmp'), repr(sys.stdin.read()), sys.argv)"
)


def test_a_prepared_guest_takes_the_next_command_and_starts_clean(tree: Path, state: Path) -> None:
    names = ["python", "-c", "print(sorted(globals()))"]
    with tool_for(tree, state) as tool:
        cold = tool.exec(names)
        first = tool.exec(["python", "-c", FIRST])  # what it leaves, nothing sees after
        warm = tool.exec(names)
        after = tool.exec(["python", "-c", SECOND, "a b", "c"])
    ran = [r.python["prepared"] if r.python else None for r in (cold, first, warm, after)]
    assert ran == [False, True, True, True]
    assert first.stdout.strip() == "['left']", first.stderr
    # __main__ as a cold guest's: no name of the bootstrap's own left
    assert warm.stdout == cold.stdout and "'__builtins__'" in cold.stdout, warm.stderr
    expected = "None None None [] '' ['-c', 'a b', 'c']"
    assert after.stdout.strip() == expected, after.stderr
    assert prepared_dirs(state) == []  # the last one's /tmp removed with it at close


def test_a_script_runs_in_a_prepared_guest_as_in_a_cold_one(tree: Path, state: Path) -> None:
    with tool_for(tree, state) as tool:
        cold = tool.exec(["python", "pkg/show.py", "x"])
        warm = tool.exec(["python", "pkg/show.py", "x"])
    assert cold.python is not None and warm.python is not None
    assert (cold.python["prepared"], warm.python["prepared"]) == (False, True)
    assert warm.stdout == cold.stdout == "args ['pkg/show.py', 'x']\n", warm.stderr


# The interpreter's own classes (object's direct subclasses), by name.
CLASSES = "print(sorted(c.__name__ for c in object.__subclasses__()))"


def test_a_script_handed_to_a_prepared_guest_pays_no_more_than_a_code_line(
    tree: Path, state: Path
) -> None:
    # A script's bootstrap compiles its file with the builtin compile(), whose first call
    # builds CPython's AST types (~51M fuel, 10-12 ms of CPU here): after the hand-off, in
    # each served script call, until the start built them (issue 31, pyserve).
    with tool_for(tree, state) as tool:
        cold = tool.exec(["python", "-c", CLASSES])
        code = tool.exec(["python", "-c", "pass"])
        script = tool.exec(["python", "pkg/show.py", "x"])
        warm = tool.exec(["python", "-c", CLASSES])
    runs = (cold, code, script, warm)
    assert [r.python["prepared"] if r.python else None for r in runs] == [False, True, True, True]
    assert code.python is not None and script.python is not None
    extra = int(script.python["fuel_used"]) - int(code.python["fuel_used"])
    assert extra < 15_000_000, (code.python, script.python)
    # built in the prepared start, as a script's own start builds them: the one class a
    # prepared -c guest has that a cold -c guest lacks
    first, later = (set(eval(r.stdout)) for r in (cold, warm))
    assert later - first == {"AST"} and first <= later, (cold.stdout, warm.stdout)


AT_EXIT = (
    "import atexit, sys\n"
    "class Cycle:\n"
    "    def __del__(self): sys.stdout.write('collected at exit\\n')\n"
    "c = Cycle(); c.me = c\n"
    "atexit.register(print, 'atexit ran')\n"
    "sys.stdout.write('unflushed ')"
)


def test_a_guests_exit_skips_its_starts_objects_and_keeps_what_exit_does(
    tree: Path, state: Path
) -> None:
    # CPython's finalization collects every object several times over: ~36M of the ~49M
    # fuel a -c pass spent after its hand-off went on the start's own objects (10-20 ms on
    # every served call's path). The start freezes them (gc.freeze); the command's are
    # collected as before.
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        quit_ = tool.exec(["python", "-c", "import os; os._exit(0)"])
        done = tool.exec(["python", "-c", "pass"])
        kept = tool.exec(["python", "-c", AT_EXIT])
        tool.environ["TZ"] = "Other/Zone"  # another key: a cold guest
        cold = tool.exec(["python", "-c", AT_EXIT])
    runs = (quit_, done, kept, cold)
    assert [r.python["prepared"] if r.python else None for r in runs] == [True, True, True, False]
    assert quit_.python is not None and done.python is not None
    # both counted from their store's start, which varies by ~0.5M
    finalization = int(done.python["fuel_used"]) - int(quit_.python["fuel_used"])
    assert finalization < 25_000_000, (quit_.python, done.python)
    # the exit's own work, prepared and cold alike: flush, atexit, a cycle collected
    for ran in (kept, cold):
        assert ran.stdout == "unflushed atexit ran\ncollected at exit\n", ran.stderr


def test_a_replaced_copy_is_never_handed_over(tree: Path, state: Path, tmp_path: Path) -> None:
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        guest = prepared_guest(the_runtime())
        root = copy_root(guest, state)
        # the prepared guest's directory moved away (a marker only it holds), another
        # directory of the same contents at its path
        aside = tmp_path / "aside"
        shutil.move(str(root), str(aside))
        shutil.copytree(aside, root, symlinks=True)
        (aside / "old-only.txt").write_text("the replaced copy")
        ran = tool.exec(["python", "-c", "import os; print(sorted(os.listdir('.')))"])
    assert ran.python is not None and ran.python["prepared"] is False, ran.python
    assert "old-only.txt" not in ran.stdout and "data.txt" in ran.stdout, ran.stderr
    assert not psutil.pid_exists(guest.pid)  # refused, then reaped


def test_another_environment_starts_cold(tree: Path, state: Path) -> None:
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        guest = prepared_guest(the_runtime())
        tool.environ["TZ"] = "Other/Zone"
        ran = tool.exec(["python", "-c", "import os; print(os.environ.get('TZ'))"])
    assert ran.stdout.strip() == "Other/Zone", ran.stderr
    assert ran.python is not None and ran.python["prepared"] is False
    assert not psutil.pid_exists(guest.pid)


def test_a_prepared_guest_never_used_is_killed_reaped_and_its_tmp_removed(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wasi_prepared, "IDLE_SECONDS", 1.0)
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        runtime = the_runtime()
        guest = prepared_guest(runtime)
        assert len(prepared_dirs(state)) == 1
        deadline = time.monotonic() + 30
        while psutil.pid_exists(guest.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        # gone, not a zombie: the runtime reaped it
        assert not psutil.pid_exists(guest.pid)
        assert prepared_dirs(state) == []
        again = tool.exec(["python", "-c", "print('cold')"])
        assert again.stdout.strip() == "cold" and again.python is not None
        assert again.python["prepared"] is False
        prepared_guest(runtime)  # prepared again after it
    assert prepared_dirs(state) == []  # the runtime killed at close: its guest's /tmp swept


def test_fuel_still_ends_a_prepared_command_within_the_stated_allowance(
    tree: Path, state: Path
) -> None:
    fuel = 700_000_000
    limits = {"fuel": fuel, "memory_bytes": 64 * 1024 * 1024, "wall_seconds": 60}
    with tool_for(tree, state, limits) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        burn = tool.exec(["python", "-c", "while True: pass"])
        after = tool.exec(["python", "-c", "print('next')"])
    assert burn.python is not None and burn.python["prepared"] is True
    assert burn.limits_hit == ["fuel"] and burn.exit_code == 137
    # all of it: the configured fuel and the start's allowance, never more
    assert burn.python["fuel_used"] == fuel + wasi_prepared.START_ALLOWANCE
    assert burn.python["fuel_start_allowance"] == wasi_prepared.START_ALLOWANCE
    assert after.stdout.strip() == "next" and after.python is not None
    assert after.python["prepared"] is True


def test_halt_kills_a_command_handed_to_a_prepared_guest(tree: Path, state: Path) -> None:
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        guest = prepared_guest(the_runtime())
        run = tool.exec(["python", "-c", "while True: pass"], window=0.5)
        assert run.handle is not None
        assert psutil.Process(guest.pid).name() != NAME  # it is the command's now
        halted = tool.halt(run.handle)
        assert halted.exit_code == 137
        assert not psutil.pid_exists(guest.pid)


def test_a_stopped_prepared_guest_holds_no_command(tree: Path, state: Path) -> None:
    # It answers the hand-off at once, before its start is done; one that does not (stopped
    # here, wedged) held the runtime, and every command of it, forever.
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        guest = prepared_guest(the_runtime())
        stop_whole(guest)
        ran = tool.exec(["python", "-c", "print('cold')"])
    assert ran.stdout.strip() == "cold" and ran.python is not None, ran.stderr
    assert ran.python["prepared"] is False
    assert not psutil.pid_exists(guest.pid)  # killed and reaped
