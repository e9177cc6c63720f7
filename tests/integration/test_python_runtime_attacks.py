"""Attacks on the python arm's runtime process (wasi_runtime.py, wasi_forked.py), for real:
a guest's own exit status, many commands at once from threads, what the runtime holds that a
forked command inherits, the runtime killed mid-command, the owner killed outright, a reap of
a pid not forked for its asker, and a runtime used after it was closed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from sprawl_orch import ExecTool
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.native_fallbacks import wasi_forked, wasi_runtime
from tests.integration.test_python_arm import state, tool_for, tree
from tests.integration.test_python_runtime import (
    guests,
    harvested,
    prepared_guest,
    the_runtime,
    tool,
)

__all__ = ["state", "tool", "tree"]  # fixtures, used here by name

pytestmark = pytest.mark.skipif(
    not wasi_forked.usable(), reason="the runtime process needs fork, sessions and pidfds"
)


@pytest.mark.parametrize("status", [126, 255, 256])
def test_a_guest_exit_status_past_125_is_a_trap_not_a_runtime_failure(
    tool: ExecTool, status: int
) -> None:
    # wasmtime's proc_exit refuses a status outside [0, 126) with a plain error (not a Trap):
    # the runtime ended with a traceback, status 1, and the result blamed the runtime.
    result = tool.exec(["python", "-c", f"import sys; sys.exit({status})"])
    assert result.python is not None
    assert "runtime_failed" not in result.python, result.stderr
    assert result.exit_code == 134
    assert "invalid exit status" in str(result.python["trap"])
    assert guests(the_runtime()) == []


def test_many_commands_at_once_from_threads_keep_their_own_output_and_status(
    tool: ExecTool,
) -> None:
    got: dict[int, tuple[str, int | None]] = {}

    def one(i: int) -> None:
        code = f"import sys, time\ntime.sleep(0.{i})\nprint('n', {i})\nsys.exit({i})"
        ran = tool.exec(["python", "-c", code])
        got[i] = (ran.stdout.strip(), ran.exit_code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == {i: (f"n {i}", i) for i in range(8)}
    runtime = the_runtime()
    assert guests(runtime) == []  # every one reaped, not a zombie left
    assert len(runtime.threads()) == 1  # forking stays safe


def test_the_runtime_holds_no_environment_and_only_its_own_fds(tool: ExecTool) -> None:
    # The tool's environ carries SPRAWL_PY_SECRET (tool_for): the runtime, whose memory every
    # command inherits, must hold none of it, nor any fd of sprawl-orch's beyond its door
    # and the tool's stream.
    assert tool.exec(["python", "-c", "pass"]).exit_code == 0
    runtime = the_runtime()
    prepared_guest(runtime)  # its channel and pidfd are the runtime's too
    assert Path(f"/proc/{runtime.pid}/environ").read_bytes() == b""
    held = {
        fd: os.readlink(f"/proc/{runtime.pid}/fd/{fd}")
        for fd in os.listdir(f"/proc/{runtime.pid}/fd")
    }
    targets = set(held.values())
    allowed = ("/dev/null", "runtime.stderr", "memfd:sprawl-wasm-module", "socket:[", "[pidfd]")
    assert all(any(a in t for a in allowed) for t in targets), held
    # the door, the tool's stream and the pre-started guest's channel (wasi_prepared.py)
    assert sum(t.startswith("socket:[") for t in targets) == 3, held
    out = tool.exec(["python", "-c", "import os; print(sorted(os.environ))"])
    assert "SPRAWL_PY_SECRET" not in out.stdout and "s3cret" not in out.stdout


def test_a_runtime_killed_mid_command_takes_its_command_along(tool: ExecTool) -> None:
    # Its commands die with it (PR_SET_PDEATHSIG): a killed runtime once left its command
    # running, an orphan nobody governed but its own limits. The sleep outlasts the test:
    # only that kill ends the guest within `gone`'s 30 s (its wall time is 600 s).
    code = "import time\ntime.sleep(3600)\nprint('outlived')"
    result = tool.exec(["python", "-c", code], window=0.5)
    assert result.handle is not None
    runtime = the_runtime()
    (guest,) = guests(runtime)
    runtime.send_signal(signal.SIGKILL)
    runtime.wait(10)
    # Its runtime gone, the dead orphan is init's to reap (this machine's init does, lazily).
    assert gone(guest.pid), guest
    done = harvested(tool, result.handle)
    assert "outlived" not in done.stdout
    assert done.python is not None and "runtime_failed" in done.python, done
    again = tool.exec(["python", "-c", "print('next')"])
    assert again.stdout.strip() == "next"
    assert again.python is not None and "had ended" in again.python["runtime_restarted"]


def test_a_runtime_reaps_only_what_it_forked_for_that_owner(tree: Path, state: Path) -> None:
    # Two owners on one runtime (as two served calls on the exec server's): neither reaps
    # the other's command (its status would be lost to its owner), nor any other pid.
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        runtime = the_runtime()
        mine = tool.exec(["python", "-c", "import time; time.sleep(3600)"], window=0.5)
        assert mine.handle is not None
        (guest,) = guests(runtime)
        door = [
            int(fd)
            for fd in os.listdir(f"/proc/{runtime.pid}/fd")
            if os.readlink(f"/proc/{runtime.pid}/fd/{fd}").startswith("socket:[")
        ]
        assert len(door) == 2  # the door and the tool's stream: nothing else reaches it
        with pytest.raises(ValueError, match="not started"):
            tool_runtime(tool).reap(guest.pid + 1)
        held = tool_runtime(tool)._door
        assert held is not None
        stream = wasi_forked.connect(held)
        for pid in (guest.pid, os.getpid(), 1):
            wasi_runtime.send(stream, {"op": "reap", "pid": pid})
            answer, _ = wasi_runtime.receive(stream)
            assert answer is not None and answer["status"] is None, answer
            assert "not started for you" in answer["refused"]
        stream.close()
        assert guest.is_running() and guest.status() != psutil.STATUS_ZOMBIE
        done = tool.halt(mine.handle)
        assert done.exit_code == 137, done
    assert gone(guest.pid)


def test_a_closed_runtime_closes_once_and_refuses_commands(tree: Path, state: Path) -> None:
    with tool_for(tree, state) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        runtime = tool_runtime(tool)
        proc = the_runtime()
    runtime.close()  # the tool closed it already: a second close is nothing
    proc.wait(10)
    with pytest.raises(SprawlError) as refused:
        runtime.fork({}, [])
    assert refused.value.code is ErrorCode.INTERNAL


def tool_runtime(tool: ExecTool) -> wasi_forked.Runtime:
    """The tool's python arm runtime (white box: the tool builds its arm itself)."""
    runtime = getattr(tool.arm(), "_runtime", None)
    assert isinstance(runtime, wasi_forked.Runtime), tool.arm()
    return runtime


def gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not psutil.pid_exists(pid)


OWNER = """
import os, sys, time
from pathlib import Path
import psutil
from sprawl_orch import Config, ExecTool
tree, state = Path(sys.argv[1]), Path(sys.argv[2])
config = Config(sandbox={"arm": "python"}, state={"dir": str(state)})
tool = ExecTool(config, tree)
ran = tool.exec(["python", "-c", "while True: pass"], window=0.5)
assert ran.handle is not None
(runtime,) = [c for c in psutil.Process().children() if "wasi_runtime.py" in " ".join(c.cmdline())]
print(runtime.pid, *[g.pid for g in runtime.children()], flush=True)
time.sleep(600)
"""


def test_the_owner_killed_takes_the_runtime_and_its_guest_along(tree: Path, state: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tree), str(state)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2, pids
    finally:
        owner.kill()
        owner.wait()
    assert [p for p in pids if not gone(p)] == []


def _code_mapping(pid: int) -> tuple[int, int, str]:
    """The runtime's executable mapping of the compiled module: address, offset, what."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        what = fields[5] if len(fields) > 5 else ""
        if "x" in fields[1] and ("module.cwasm" in what or "memfd:" in what):
            return int(fields[0].split("-")[0], 16), int(fields[2], 16), what
    raise AssertionError(f"no executable mapping of the module in {pid}")


def test_a_write_in_place_to_the_cache_reaches_no_loaded_runtime(
    tree: Path, state: Path, tmp_path: Path
) -> None:
    # The check before each fork catches a change (ctime), but a write landing between the
    # check and the forked command's run went straight into native code the command runs:
    # the runtime mapped the cache file itself (MAP_PRIVATE shows the file's later writes).
    with tool_for(tree, state) as first:  # the session's cache, compiled if not yet
        assert first.exec(["python", "-c", "pass"]).exit_code == 0
    own = tmp_path / "own-state"
    own.mkdir(mode=0o700)
    shutil.copytree(state / "wasm-cache", own / "wasm-cache")
    (module,) = (own / "wasm-cache").glob("*/module.cwasm")
    with tool_for(tree, own) as tool:
        assert tool.exec(["python", "-c", "pass"]).exit_code == 0
        runtime = the_runtime()
        address, offset, what = _code_mapping(runtime.pid)
        with open(f"/proc/{runtime.pid}/mem", "rb") as mem:
            mem.seek(address)
            before = mem.read(4096)
        with open(module, "r+b") as f:  # as a process of this uid, unconfined, could
            f.seek(offset)
            f.write(bytes(b ^ 0xFF for b in before))
        with open(f"/proc/{runtime.pid}/mem", "rb") as mem:
            mem.seek(address)
            after = mem.read(4096)
        assert after == before, f"the runtime's code changed under it ({what})"
        assert "memfd:" in what  # a sealed copy of the bytes hashed, no file of ours
        refused = tool.exec(["python", "-c", "print('ran')"])  # the file changed: checked
    assert refused.code is ErrorCode.SANDBOX_DENIED and "ran" not in (refused.stdout or "")
