"""Pre-started guests: the python arm's runtime (wasi_runtime.py) starts the next command's
CPython ahead of it (issue 31: its start inside WebAssembly was 60-80 ms of a served
`python -c pass`, more than 2x the host's whole `python -c pass`).

Once a command is reaped, the runtime forks one *prepared* guest for that command's key (the
copy and its root's (dev, ino), the working directory, the virtualenv paths, exactly the
same environment, fuel, memory and wall limits): a process in a session of its own that makes
a fresh Store and instance as a command's would and runs CPython's start and the bootstrap up
to a blocking read of its stdin, a pipe only this process holds. The next command whose key is
equal is handed to it (`handoff`): the process checks the copy's root again (another (dev,
ino) at its path: refused), moves its own private /tmp (empty: nothing ran yet) to the
command's, dup2s the command's stdout and stderr over its own, says it took the command -- the
owner then announces it to the guardian and joins it to the run's cgroup, as any command --
and only after the go byte starts the command's wall-time deadline and /tmp watcher and
writes the command (its argv) into the pipe, which it then closes: the guest's stdin is empty
after it, as a cold guest's. Any difference of key, a refusal or a dead prepared guest means a
cold start as before. An environment under which CPython's start may read a file (START_SAFE)
is never prepared: the start would read the copy before the command's sync. One prepared guest
serves exactly one command and is then gone; one not
used (another key came, IDLE_SECONDS passed, the runtime ends) is killed and reaped, and its
/tmp removed. It dies with its runtime (PR_SET_PDEATHSIG), as every command.

Fuel: the store of a prepared guest is given the configured fuel plus START_ALLOWANCE, and its
start is paid from it. wasmtime's Python API cannot read or set a store's fuel while the guest
is inside the host call that waits for the command, so the start's own cost (~250M here; it
varies by ~0.5M with the hash seed) cannot be split off exactly: a command handed to a prepared
guest may run up to START_ALLOWANCE minus its start's cost (~150M, ~20 ms) more than the
configured fuel, never less. A start that would need more than the allowance runs out before
it reads a command and is never used. The result's `python.prepared` says which path ran.

Run by path in the runtime process (no sprawl_orch import): the standard library only; the
guest module (wasi_guest.py) is passed in.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

START_ALLOWANCE = 400_000_000
IDLE_SECONDS = 60.0
HANDOFF_SECONDS = 10.0
UNUSED_EXIT = 124  # a prepared guest that never ran a command
GATE_EXIT = 125  # as a cold command's (wasi_runtime): never released, never run
_KEY = ("env", "copy", "workdir", "sites", "fuel", "memory_bytes", "wall_seconds", "prepare")
_PR_SET_NAME = 15
PREPARED_NAME = b"wasm-prepared"  # its comm until a command is handed to it (tests tell it apart)


# PYTHON* variables that shape CPython's start without naming a file or a module in it, and
# without making it write or cost more. Any other (PYTHONPATH, PYTHONUSERBASE, PYTHONHOME,
# PYTHONSTARTUP, PYTHONPLATLIBDIR, one unknown) means a cold start (atkprep):
# - it may make the start read the copy, and a prepared guest starts before the sync of its
#   command: PYTHONPATH=<tree> ran a sitecustomize.py one command planted (an extra the sync
#   deletes) or the person's previous version in the next command;
# - PYTHONVERBOSE, PYTHONCOERCECLOCALE=warn, PYTHONWARNINGS, PYTHONDEVMODE make the start write
#   to stderr, which is the runtime's log until the hand-off: the command's stderr lacked
#   what a cold one's held (and PYTHONTRACEMALLOC=25 made the start cost 1.6G fuel, not 250M).
START_SAFE = frozenset(
    {
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONNOUSERSITE",  # HOME is the private /tmp: its user site is empty either way
        "PYTHONSAFEPATH",
        "PYTHONOPTIMIZE",
        "PYTHONFAULTHANDLER",
        "PYTHONINTMAXSTRDIGITS",
        "PYTHONNODEBUGRANGES",
    }
)


# CPython's start costs ~4K fuel per byte of its environment (measured: 250M bare, 320M with
# 16 KB, 700M with one 120 KB variable). Past this size it may cost more than START_ALLOWANCE,
# and the command would get less than the configured fuel after the hand-off (atkprep).
START_ENV_BYTES = 16 * 1024


def start_unsafe(env: dict[str, str]) -> bool:
    """Whether CPython's start under this environment may read a file of the copy, write, or
    cost more than START_ALLOWANCE: then it is never prepared."""
    size = sum(
        len(k.encode(errors="surrogateescape")) + len(v.encode(errors="surrogateescape")) + 2
        for k, v in env.items()
    )
    return size > START_ENV_BYTES or any(
        n.startswith("PYTHON") and n not in START_SAFE for n in env
    )


def key(spec: dict[str, Any]) -> str | None:
    """What a prepared guest must share with the command it takes; None: never prepared
    (also when its start could read the copy before the command's sync)."""
    if not spec.get("prepare") or start_unsafe(spec.get("env") or {}):
        return None
    return json.dumps({k: spec.get(k) for k in _KEY}, sort_keys=True)


def header(argv: list[str]) -> bytes | None:
    """The command as the prepared bootstrap reads it: argv[1:] joined by NUL; None when that
    cannot carry it (a NUL or a lone surrogate in an argument): a cold start."""
    if any("\0" in a for a in argv):
        return None
    try:
        return "\0".join(argv[1:]).encode("utf-8")
    except UnicodeEncodeError:
        return None


def boot(guest: Any) -> str:
    """The cold bootstrap's start, then the command read from stdin and run by the cold
    bootstrap's own tail for its form; no name of its own is left in __main__."""
    tails = [guest._RUN_CODE, guest._RUN_SCRIPT]
    code, script = ("".join("    " + line for line in t.splitlines(True)) for t in tails)
    return str(
        guest._BOOT
        # CPython's AST types, which a script's compile() builds first (51M fuel): built
        # before the hand-off, not in each served script call (issue 31, pyserve)
        + 'compile("", "", "exec")\n'
        + guest._FREEZE
        + '_s.orig_argv[1:] = _s.argv = _s.stdin.buffer.read().decode("utf-8").split("\\0")\n'
        + 'if _s.argv[0] == "-c":\n'
        + code
        + "else:\n"
        + script
    )


class Held:
    """The runtime's handle on its one prepared guest."""

    def __init__(self, pid: int, chan: socket.socket, key: str, tmp: str, idle: float) -> None:
        self.pid = pid
        self.idle = idle
        self.chan = chan
        self.key = key
        self.tmp = tmp
        self.pidfd = os.pidfd_open(pid)
        self.since = time.monotonic()

    def idle_ms(self) -> int:
        return max(0, int((self.since + self.idle - time.monotonic()) * 1000))

    def handoff(self, spec: dict[str, Any], fds: list[int], send: Any, receive: Any) -> bool:
        """Whether it took the command (then its pid is the command's); else it is gone."""
        if key(spec) != self.key or header(spec["argv"]) is None:
            return False
        # Bounded: a prepared guest that never answers (stopped, wedged) would hold every
        # command of this runtime; it answers before its start is done, at once.
        self.chan.settimeout(HANDOFF_SECONDS)
        try:
            send(self.chan, {"spec": spec}, fds)
            answer, _ = receive(self.chan)
        except OSError:  # it died meanwhile, or said nothing in time: a cold start
            return False
        return answer is not None and "taken" in answer

    def release(self) -> None:
        """After a hand-off: the process is its command's, reaped as any."""
        self.chan.close()
        os.close(self.pidfd)

    def kill(self) -> None:
        """Not used: killed, reaped, its /tmp removed."""
        self.chan.close()
        with contextlib.suppress(ProcessLookupError):  # it ended already: nothing to signal
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        os.close(self.pidfd)
        with contextlib.suppress(ChildProcessError):  # reaped already (never: only here)
            os.waitpid(self.pid, 0)
        shutil.rmtree(self.tmp, ignore_errors=True)


def prepare(
    spec: dict[str, Any],
    fork: Callable[[Callable[[], None]], int],
    guest: Any,
    loaded: tuple[Any, Any],
    wire: tuple[Any, Any],
) -> Held:
    """Fork a prepared guest for `spec`'s key; `fork(body)` forks as the runtime forks a
    command (a session of its own, the death signal) and runs `body` in the child. `wire`:
    the runtime's send and receive."""
    # Named after this runtime: one killed (a tool's, at its close) leaves it to sweep().
    tmp = tempfile.mkdtemp(prefix=f"prep-{os.getpid()}-", dir=spec["prepare"])
    ours, theirs = socket.socketpair()  # a stream, as receive() reads one

    def body() -> None:
        ours.close()
        prepared(spec, tmp, theirs, guest, loaded, wire)

    try:
        pid = fork(body)
    except BaseException:
        ours.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        theirs.close()
    found = key(spec)
    assert found is not None
    return Held(pid, ours, found, tmp, float(spec.get("prepare_idle", IDLE_SECONDS)))


def sweep(where: str) -> None:
    """Remove the /tmp of prepared guests whose runtime is gone (killed: a tool kills its own
    runtime at close, its prepared guest dying with it before anyone removed its /tmp)."""
    with contextlib.suppress(OSError):  # no prepare dir yet: nothing to sweep
        for name in os.listdir(where):
            parts = name.split("-")
            if len(parts) != 3 or parts[0] != "prep" or not parts[1].isdigit():
                continue
            if not _runtime_alive(int(parts[1])):  # gone: its /tmp is litter
                shutil.rmtree(os.path.join(where, name), ignore_errors=True)


def _runtime_alive(pid: int) -> bool:
    """Whether `pid` is a runtime process still running. A zombie is not (a runtime killed with
    its owner waits a moment for init to reap it: the next tool's sweep passed its /tmp by,
    atkprep), nor a process that took its number since (its /tmp stayed for good)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            runtime = b"wasi_runtime.py" in f.read()
    except FileNotFoundError:  # no such process: its runtime is gone
        return False
    except OSError:  # no /proc to read: as far as a signal tells
        try:
            os.kill(pid, 0)
        except ProcessLookupError:  # no such process: its runtime is gone
            return False
        except PermissionError:  # another user's process: alive, not ours to judge
            return True
        return True
    return runtime and state != b"Z"


def _name(name: bytes) -> None:
    # no /proc: the name only tells a prepared guest apart (tests, ps)
    with contextlib.suppress(OSError), open("/proc/self/comm", "wb") as f:
        f.write(name)


def prepared(
    spec: dict[str, Any],
    tmp: str,
    chan: socket.socket,
    guest: Any,
    loaded: tuple[Any, Any],
    wire: tuple[Any, Any],
) -> None:
    """The prepared guest's process; never returns."""
    (engine, module), (send, receive) = loaded, wire
    _name(PREPARED_NAME)
    copy = os.open(spec["copy"], os.O_RDONLY | os.O_DIRECTORY)
    root = os.fstat(copy)
    r, w = os.pipe()
    argv = ["python", "-c", boot(guest), spec["workdir"], "\n".join(spec.get("sites") or ())]
    # By the held fd: the directory wasmtime opens is the one whose (dev, ino) is checked.
    wasi = guest.wasi_config(spec, argv, f"/proc/self/fd/{copy}", tmp, f"/dev/fd/{r}")
    os.close(r)  # wasmtime opened its own
    fuel = spec["fuel"] + START_ALLOWANCE
    store, instance = guest.instantiate(engine, module, spec, fuel, wasi)
    meter = guest.Meter(engine)
    taken: dict[str, Any] = {}
    lock = threading.Lock()

    def handoff() -> None:
        try:
            message, fds = receive(chan)
        except OSError:  # reset: the runtime died, taken as EOF
            message, fds = None, []
        if message is None:  # the runtime dropped it
            os._exit(UNUSED_EXIT)
        command = message["spec"]
        why = None
        st = None
        with contextlib.suppress(OSError):  # unreadable: refused below
            st = os.stat(command["copy"])
        if key(command) != key(spec):
            why = "another key"
        elif st is None or (st.st_dev, st.st_ino) != (root.st_dev, root.st_ino):
            why = f"the copy at {command['copy']} is not the directory prepared"
        else:
            try:
                os.rename(tmp, command["tmp"])  # an empty directory made for the command
            except OSError as err:
                why = f"its /tmp could not become the command's: {err.strerror}"
        with lock:
            if why is None and not meter.ended.is_set():
                taken.update(command)
                # in its report also when the deadline or the /tmp watcher ends it (atkprep:
                # a sleep past wall_seconds said prepared False, no allowance)
                meter.marks.update(prepared=True, fuel_start_allowance=START_ALLOWANCE)
        if not taken:
            with contextlib.suppress(OSError):  # the runtime is gone: we exit anyway
                send(chan, {"refused": why or "the prepared guest ended"})
            os._exit(UNUSED_EXIT)
        out, errs, go = fds
        for fd, target in ((out, 1), (errs, 2)):
            os.dup2(fd, target)
            os.close(fd)
        _name(b"wasm-guest")
        with contextlib.suppress(OSError):  # the runtime is gone: the gate says so next
            send(chan, {"taken": os.getpid()})
        chan.close()
        if not os.read(go, 1):
            os._exit(GATE_EXIT)
        os.close(go)
        if isinstance(command.get("umask"), int):
            os.umask(command["umask"])
        meter.begin(command)
        data = header(command["argv"]) or b""
        while data:
            data = data[os.write(w, data) :]
        os.close(w)

    threading.Thread(target=handoff, daemon=True).start()
    report = guest.drive(store, instance, meter, spec["memory_bytes"], fuel)
    with lock:
        meter.ended.set()
        command = dict(taken)
    if not command:  # ended before any command came (its start failed): never used
        os._exit(UNUSED_EXIT)
    report.update(meter.marks)
    with open(command["report"], "w", encoding="utf-8") as f:
        json.dump(report, f)
    os._exit(int(report["exit_code"]))
