"""Attacks on pre-started guests (native_fallbacks/wasi_prepared.py), for real: what a prepared
guest does before its command is known must be nothing a cold guest would not do for that
command, and nothing of one command may reach the next through it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sprawl_orch.native_fallbacks import wasi_forked, wasi_prepared
from tests.integration.test_python_arm import state, tool_for, tree
from tests.integration.test_python_runtime import the_runtime
from tests.integration.test_python_served import PROGRAM, call, served, shared_runtime

__all__ = ["served", "state", "tree"]  # fixtures of other test files, used here by name

pytestmark = pytest.mark.skipif(
    not wasi_forked.usable(), reason="the runtime process needs fork, sessions and pidfds"
)

NAME = wasi_prepared.PREPARED_NAME.decode()


def settled(runtime: psutil.Process) -> psutil.Process | None:
    """The runtime's prepared guest once it waits for its command (its main thread parked
    while wasmtime's stdin worker reads the pipe: CPython's start is over), or None when it
    made none. Whatever the start does, it has done by then: the next command cannot race it."""
    found: list[psutil.Process] = []
    seen = time.monotonic() + 3  # forked just after the reap's answer, when it is made
    while not found and time.monotonic() < seen:
        found = [c for c in runtime.children() if c.name() == NAME]
        time.sleep(0.02)
    if not found:
        return None
    (guest,) = found
    parked = 0
    deadline = time.monotonic() + 60
    while parked < 5 and time.monotonic() < deadline:
        wchan = Path(f"/proc/{guest.pid}/task/{guest.pid}/wchan").read_text()
        parked = parked + 1 if "futex" in wchan else 0
        time.sleep(0.02)
    assert parked == 5, f"prepared guest {guest.pid} never reached its read"
    return guest


# Planted by one command in the copy (an extra the next sync deletes): CPython imports
# sitecustomize from sys.path at its start, and PYTHONPATH (passed through) names the tree.
PLANT = (
    "open('sitecustomize.py', 'w').write('import builtins; builtins.PLANTED = \"ran ahead\"\\n')"
)
LOOK = "import builtins; print(getattr(builtins, 'PLANTED', None))"


def test_a_file_planted_in_the_copy_never_runs_in_the_next_command(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A project that passes PYTHONPATH (a src layout, the tree itself): a cold guest imports
    # sitecustomize from the copy as it is when its command starts, after the sync.
    monkeypatch.setenv("PYTHONPATH", str(tree))
    with tool_for(tree, state, env_passthrough=["PYTHONPATH"]) as tool:
        planted = tool.exec(["python", "-c", PLANT])
        assert planted.exit_code == 0, planted.stderr
        settled(the_runtime())  # the agent thinks between two commands
        assert not (tree / "sitecustomize.py").exists()  # only the copy had it
        after = tool.exec(["python", "-c", LOOK])
    # The sync deleted the extra before this command: nothing of the first may run here.
    assert after.stdout.strip() == "None", (after.python, after.stderr)
    # a start that reads the copy is never made ahead of its command
    assert after.python is not None and after.python["prepared"] is False


def test_a_tree_change_before_the_command_is_what_the_command_runs(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The person edits their sitecustomize between two commands: the second runs the new one.
    monkeypatch.setenv("PYTHONPATH", str(tree))
    (tree / "sitecustomize.py").write_text("import builtins; builtins.PLANTED = 'old'\n")
    with tool_for(tree, state, env_passthrough=["PYTHONPATH"]) as tool:
        first = tool.exec(["python", "-c", LOOK])
        assert first.stdout.strip() == "old", first.stderr
        settled(the_runtime())
        (tree / "sitecustomize.py").write_text("import builtins; builtins.PLANTED = 'new'\n")
        os.utime(tree / "sitecustomize.py", (1, 1))  # another mtime whatever the clock
        second = tool.exec(["python", "-c", LOOK])
    assert second.stdout.strip() == "new", (second.python, second.stderr)


def test_what_the_start_writes_is_the_commands_as_in_a_cold_guest(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PYTHONVERBOSE: CPython's start writes its imports to stderr. A prepared guest started
    # before its command had the runtime's stderr (its log), not the command's.
    monkeypatch.setenv("PYTHONVERBOSE", "1")
    with tool_for(tree, state, env_passthrough=["PYTHONVERBOSE"]) as tool:
        cold = tool.exec(["python", "-c", "pass"])
        settled(the_runtime())
        second = tool.exec(["python", "-c", "pass"])
    assert "import 'encodings'" in cold.stderr, cold.stderr[-500:]
    assert "import 'encodings'" in second.stderr, (second.python, second.stderr[-500:])
    log = (state / "wasm-runtime" / "runtime.stderr").read_text(errors="replace")
    assert "encodings" not in log, log[-500:]


def prepared_of(state: Path) -> list[psutil.Process]:
    """Live prepared guests whose /tmp is in this state directory (whoever's child)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != NAME:
            continue
        with contextlib.suppress(psutil.Error):
            if any(str(state) in f.path for f in proc.open_files()) or any(
                str(state) in os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                for fd in os.listdir(f"/proc/{proc.pid}/fd")
            ):
                found.append(proc)
    return found


def gone(state: Path, within: float = 30.0) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    left = prepared_of(state)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = prepared_of(state)
    return left


OWNER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.integration.test_python_arm import tool_for
tool = tool_for(Path(sys.argv[2]), Path(sys.argv[3]))
print(tool.exec(["python", "-c", "pass"]).exit_code, flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("victim", ["owner", "runtime"])
def test_a_waiting_prepared_guest_dies_with_its_owner_or_runtime_and_leaves_nothing(
    tree: Path, state: Path, victim: str
) -> None:
    root = Path(__file__).resolve().parents[2]
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(root), str(tree), str(state)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "0"
        runtime = next(
            c
            for c in psutil.Process(owner.pid).children()
            if any(p.endswith("wasi_runtime.py") for p in c.cmdline())
        )
        guest = settled(runtime)
        assert guest is not None
        (psutil.Process(owner.pid) if victim == "owner" else runtime).kill()
        assert gone(state) == []  # no prepared guest left running, whoever's
        if victim == "owner":  # the runtime saw its door close: killed it and removed its /tmp
            runtime.wait(30)
            assert prepared_dirs(state) == []
    finally:
        owner.kill()
        owner.wait()
    # a killed runtime's leftover /tmp: the next tool on this state sweeps it
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
    assert prepared_dirs(state) == []


def prepared_dirs(state: Path) -> list[str]:
    return sorted(os.listdir(state / "wasm-runtime" / "prepared"))


def its_tmp(guest: psutil.Process) -> Path:
    """The prepared guest's own /tmp (the prep-* directory it preopened)."""
    for fd in os.listdir(f"/proc/{guest.pid}/fd"):
        target = os.readlink(f"/proc/{guest.pid}/fd/{fd}")
        if "/wasm-runtime/prepared/prep-" in target:
            return Path(target)
    raise AssertionError(f"pid {guest.pid} holds no prepared /tmp")


@pytest.mark.parametrize("stop", ["server stop", "SIGKILL"])
def test_the_exec_servers_prepared_guest_ends_with_the_server(
    served: tuple[Path, dict[str, str]], stop: str
) -> None:
    tree, env = served
    assert call(tree, env, "pass").returncode == 0  # starts the server, then its runtime
    runtime = shared_runtime(env)
    second = call(tree, env, "pass")
    assert second.returncode == 0, second.stderr
    guest = settled(runtime)
    assert guest is not None
    tmp = its_tmp(guest)
    if stop == "SIGKILL":
        runtime.parent().kill()
    else:
        done = subprocess.run(
            [PROGRAM, "server", "stop"], env=env, capture_output=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
    # its runtime saw the door close: it killed and reaped the guest and removed its /tmp
    runtime.wait(30)
    assert not psutil.pid_exists(guest.pid)
    assert not tmp.exists()


# What a guest can reach of its host descriptors and stdin, its randomness and hash seed.
REACH = (
    "import os, random, sys\n"
    "fds = []\n"
    "for fd in range(64):\n"
    "    try:\n"
    "        st = os.fstat(fd)\n"
    "    except OSError:\n"
    "        continue\n"
    "    fds.append((fd, st.st_mode))\n"
    "print(fds, repr(os.read(0, 64)), repr(sys.stdin.read()))\n"
    "print(random.random(), hash('abc'), os.urandom(8).hex())\n"
)


def test_a_prepared_guest_reaches_what_a_cold_one_does_and_shares_no_randomness(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with tool_for(tree, state, env_passthrough=["PYTHONHASHSEED"]) as tool:
        runs = [tool.exec(["python", "-c", REACH]) for _ in range(3)]
        monkeypatch.setitem(tool.environ, "PYTHONHASHSEED", "0")
        seeded = [tool.exec(["python", "-c", "print(hash('abc'))"]) for _ in range(2)]
    ran = [r.python["prepared"] if r.python else None for r in (*runs, *seeded)]
    assert ran == [False, True, True, False, True]
    reach = {r.stdout.splitlines()[0] for r in runs}
    # the same descriptors (stdin empty, read to its end: no header left) as a cold guest's
    assert len(reach) == 1 and "b'' ''" in reach.pop(), [r.stdout for r in runs]
    # a fresh hash seed and random state each: none forked from another guest's
    assert len({r.stdout.splitlines()[1] for r in runs}) == 3
    # a start-only variable is its command's: the seed a cold guest would have
    assert seeded[0].stdout == seeded[1].stdout, [s.stdout for s in seeded]


def test_a_prepared_command_gets_at_least_the_configured_fuel_after_its_hand_off(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 120 KB variable in the environment made CPython's start cost ~700M fuel, more than
    # START_ALLOWANCE: the prepared command had configured + 400M - 700M left at its hand-off.
    monkeypatch.setenv("BIG", "x" * 120_000)
    fuel = 1_500_000_000
    limits = {"fuel": fuel, "memory_bytes": 64 * 1024 * 1024, "wall_seconds": 120}
    with tool_for(tree, state, limits, env_passthrough=["BIG"]) as tool:
        bare = tool.exec(["python", "-c", "pass"])  # cold: what this environment's start costs
        burn = tool.exec(["python", "-c", "while True: pass"])
    assert bare.python is not None and burn.python is not None
    assert burn.limits_hit == ["fuel"], burn.python
    start = int(bare.python["fuel_used"])
    used = int(burn.python["fuel_used"])
    # prepared: what it burnt after its start; cold: all of it, the start included, as always
    own = used - start if burn.python["prepared"] else used
    assert own >= fuel, (start, burn.python)


def test_a_prepared_commands_wall_time_runs_from_its_hand_off(tree: Path, state: Path) -> None:
    limits = {"wall_seconds": 2}
    with tool_for(tree, state, limits) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        settled(the_runtime())
        time.sleep(3)  # the prepared guest waits past wall_seconds: none of it is its command's
        waited = tool.exec(["python", "-c", "print('ok')"])
        asleep = tool.exec(["python", "-c", "import time; time.sleep(60)"])
        spin = tool.exec(["python", "-c", "while True: pass"])
    ran = [r.python["prepared"] if r.python else None for r in (waited, asleep, spin)]
    assert ran == [True, True, True]
    assert waited.exit_code == 0 and waited.stdout == "ok\n", waited.python
    # blocked in a host call: ended by the runtime BLOCKED_GRACE after the deadline
    assert asleep.limits_hit == ["time"] and asleep.exit_code == 137, asleep.python
    assert spin.limits_hit == ["time"] and spin.exit_code == 137, spin.python
    assert asleep.duration_ms < 30_000 and spin.duration_ms < 30_000


def test_an_activated_venv_on_path_runs_nothing_of_the_copy_at_the_start(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PATH (always passed) names the tree's venv, as an activated one does: CPython's getpath
    # could find bin/python there and take pyvenv.cfg's prefix, whose site-packages' .pth
    # files site runs at the start -- before the sync, in a prepared guest. It does not: the
    # guest's sys.executable stays empty, and the venv is only put on sys.path by the
    # bootstrap. One command plants a .pth in the copy; the next must not run it.
    venv = tree / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (venv / "bin" / "python").chmod(0o755)
    (venv / "pyvenv.cfg").write_text("home = /usr/local/bin\nversion = 3.12.0\n")
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}:/usr/bin:/bin")
    plant = (
        "open('.venv/lib/python3.12/site-packages/x.pth', 'w')"
        ".write('import builtins; builtins.PLANTED = 1\\n')"
    )
    look = "import builtins, sys; print(getattr(builtins, 'PLANTED', None), repr(sys.executable))"
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", plant]).exit_code == 0
        settled(the_runtime())
        after = tool.exec(["python", "-c", look])
    assert after.python is not None and after.python["prepared"] is True
    assert after.stdout.strip() == "None ''", after.stderr


def test_a_prepared_commands_tmp_is_the_one_watched(tree: Path, state: Path) -> None:
    # The prepared guest's /tmp became the command's at the hand-off (a rename): the watcher
    # sums the command's path, so it must be the directory the guest writes.
    limits = {"memory_bytes": 32 * 1024 * 1024, "wall_seconds": 120}
    fill = (
        "import os\nwhile True:\n"
        "    open(f'/tmp/f{os.urandom(4).hex()}', 'wb').write(b'x' * (1 << 20))"
    )
    with tool_for(tree, state, limits) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        full = tool.exec(["python", "-c", fill])
    assert full.python is not None and full.python["prepared"] is True, full.python
    assert full.limits_hit == ["memory"] and full.exit_code == 137, full.python
    assert "/tmp held" in str(full.python["trap"])
