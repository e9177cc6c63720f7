"""The exec server's python-arm runtimes (issue 31): one per state directory, shared by calls.

Through the exec server (cli/exec_server.py) every one-shot CLI call is a fork of the server,
so a runtime process a call started died with it: each call paid the runtime's ~1 s start
(a Python, `import wasmtime`, the module mapped), 20x the host's `python -c pass`. A call that
ran the python arm without a shared runtime asks for one in what it learned (core/served_memo,
kind KIND, its state directory); after that call the server (single-threaded, between calls)
finds the cache entry -- never compiling: that is a call's to pay -- verifies it (VerifiedModule:
its bytes hashed once, a sealed copy kept) and starts a runtime process (wasi_runtime.py) on
it, without waiting for it to load. Every later call inherits the door to it and the verified
module state, and its arm (wasi_python.py) hands the runtime a stream of its own: commands
are forked there, each from a runtime that never ran a guest, so nothing of one call's guest
(its globals, its /tmp, its environment) reaches the next. A call whose own check of the file
disagrees with the state that runtime loaded, or that finds it gone, starts a runtime of its
own, as outside a server, and asks again; the server then replaces it.

A shared runtime that never says it is ready (wasi_ready.connect's bound) is killed by the
call that waited on it, through the pidfd the server opened when it started it (that process,
never another that got its number), and asked for again: the server, its parent, reaps it
after that call and starts a fresh one for the next.

The server holds at most HELD_LIMIT (one per state directory in use, the oldest dropped). A
replaced or dropped runtime is not killed: its door is closed here, and it ends itself once
the calls that still hold it (inherited) have ended and its commands are reaped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sprawl_orch.core import served_memo
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.private import private_dirs, private_file
from sprawl_orch.native_fallbacks import wasi_runtime, wasi_tiering
from sprawl_orch.native_fallbacks.wasi_module import Compiled, VerifiedModule

KIND = "python-runtime"
HELD_LIMIT = 4


@dataclass
class Shared:
    """A runtime the server holds: its door, the module state it loaded, and the process
    (the server's child: only the server may poll it)."""

    door: socket.socket
    stamp: tuple[int, ...]
    module: VerifiedModule
    proc: subprocess.Popen[bytes]
    state: str
    pidfd: int  # the runtime itself, for a call to kill it stuck (kill_stuck)

    def kill_stuck(self) -> None:
        """In a call: the runtime never said it was ready. Killed (it is the server's child:
        a zombie, its number not reused, until the server reaps it) and asked for again."""
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile: nothing to kill
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        want(Path(self.state))


_held: dict[str, Shared] = {}
_retired: list[subprocess.Popen[bytes]] = []


def lookup(state: Path, entry: Compiled) -> Shared | None:
    """In a served call: the server's runtime for this state directory's cache entry."""
    held = _held.get(str(state))
    return held if held is not None and held.module.entry == entry else None


def want(state: Path) -> None:
    """In a call: ask the server for a runtime for `state` (outside a server nothing reads
    this; the next call through one finds it)."""
    served_memo.learn(KIND, str(state), True)


def after_call() -> None:
    """In the server, after each call: start the runtimes calls asked for."""
    global _retired
    _retired = [p for p in _retired if p.poll() is None]
    for state in served_memo.take(KIND):
        if not isinstance(state, str):
            continue
        held = _held.get(state)
        if held is not None and held.proc.poll() is None:
            with contextlib.suppress(SprawlError, OSError):  # refused: replaced below
                held.module.fd()  # hashed again if the file changed since
                # and replaced once the Cranelift entry exists beside its Winch one
                if held.module.stamp() == held.stamp and (
                    held.module.entry == wasi_tiering.best(Path(state))
                ):
                    continue
        # a bad or missing entry: the calls start their own runtime, which says why
        with contextlib.suppress(SprawlError, OSError):
            _start(Path(state))


def _start(state: Path) -> None:
    entry = wasi_tiering.best(state)
    if entry is None:
        return
    module = VerifiedModule(entry)
    fd = module.fd()
    door, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    stderr = private_file(private_dirs(state / "wasm-runtime") / "shared.stderr")
    try:
        proc = wasi_runtime.spawn(theirs, fd, stderr, entry.compiler)
    except BaseException:
        door.close()
        module.close()
        raise
    finally:
        theirs.close()
        os.close(stderr)
    try:
        pidfd = os.pidfd_open(proc.pid)  # unreaped (our child): it is this process
    except BaseException:
        proc.kill()
        proc.wait()
        door.close()
        module.close()
        raise
    _drop(str(state))
    _held[str(state)] = Shared(door, module.stamp(), module, proc, str(state), pidfd)
    while len(_held) > HELD_LIMIT:
        _drop(next(iter(_held)))


def _drop(state: str) -> None:
    held = _held.pop(state, None)
    if held is not None:
        held.door.close()
        held.module.close()
        os.close(held.pidfd)
        _retired.append(held.proc)


def close_all() -> None:
    """The server's end: its doors closed; each runtime ends once no call holds it."""
    for state in list(_held):
        _drop(state)
