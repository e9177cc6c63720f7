"""Tiering of the python arm's compiled module (issue 31): Winch first, Cranelift in the background.

Cranelift's compile of the 26 MB CPython module took 6.45 s wall (~11.5 CPU s on 2 cores) on
a quiet machine, all of it in the first command of a binary. Winch (wasmtime's baseline
compiler) makes it in ~1/5 the CPU, with fuel, epoch interruption and the memory cap working
as themselves, but the guest runs 1.8-2.4x slower (benchmarks/python_compilers.py). So the
first command compiles and loads the Winch entry, and starts the Cranelift compile once, in
the background; commands use the Cranelift entry as soon as it exists (choose()).

Each compiler has its own cache entry (wasi_module.cache_key holds the compiler), in the same
0700 state directory, each verified before it is mapped exactly as before (VerifiedModule).
A runtime's engine is made by the compiler of the entry it loads (wasi_runtime.spawn); one
runtime process loads one module, and its pre-started guest (wasi_prepared.py) is forked from
it, so a Winch guest never meets a Cranelift module or the other way round.

The background compile is `python -I -m sprawl_orch.native_fallbacks.wasi_tiering STATE FD`:
the caller's uid, its own session, no fd of ours but FD -- the entry's lock file, on which
the spawner took the flock (LOCK_NB) before it started it. The flock belongs to that open
file, so it is held while this process lives and released by the kernel when it ends, how
ever it ends: a second command sees it held and starts no second compile; after a compile
killed midway, the next command takes it and starts another. It writes as every compile does
(wasi_module.compile_held): a temp file in the entry renamed into place, the module before
its record, so a killed compile leaves nothing that loads. No command waits on it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from sprawl_orch.core.private import private_dirs, private_file
from sprawl_orch.native_fallbacks import wasi_module
from sprawl_orch.native_fallbacks.wasi_guest import Compiled

QUICK, OPTIMIZED = "winch", "cranelift"
LOG = "background-compile.stderr"  # under the state's wasm-runtime/: why a compile failed
# Off only in benchmarks/python_tiering.py, which measures the first command before tiering.
ENABLED = [True]
_started: list[subprocess.Popen[bytes]] = []  # ours, polled so none lingers as a zombie


def usable() -> bool:
    """flock (not Windows): without it two commands could start two compiles."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return True


def choose(state: Path) -> Compiled:
    """The entry a command loads: Cranelift's once it exists; else Winch's, compiled now if
    absent (~1 s quiet), with the Cranelift compile started in the background if none runs."""
    best = wasi_module.cached(state, OPTIMIZED)
    if best is not None or not ENABLED[0] or not usable():
        return best or wasi_module.compiled(state)
    quick = wasi_module.compiled(state, compiler=QUICK)
    start_background(state)
    return quick


def best(state: Path) -> Compiled | None:
    """The best entry already compiled (never compiles: the exec server asks this)."""
    return wasi_module.cached(state, OPTIMIZED) or wasi_module.cached(state, QUICK)


def describe(state: Path) -> str:
    """doctor's python row: which compiler the next command runs on. Only looks (no
    directory made, wasmtime not imported)."""
    if wasi_module.missing_why() is not None:
        return ""

    def there(compiler: str) -> Path | None:
        entry = state / "wasm-cache" / wasi_module.cache_key(wasi_module.PINNED_SHA256, compiler)
        return entry if (entry / "module.sha256").is_file() else None

    if there(OPTIMIZED) is not None:
        return "python.compiler: cranelift (its entry is compiled)"
    quick = there(QUICK)
    if quick is None:
        return (
            "python.compiler: none compiled yet (the first command compiles Winch's entry, "
            "~1 s quiet, and starts Cranelift's in the background)"
        )
    optimized = state / "wasm-cache" / wasi_module.cache_key(wasi_module.PINNED_SHA256, OPTIMIZED)
    running = optimized.is_dir() and wasi_module.compile_in_progress(optimized)
    return "python.compiler: winch (guest 1.8-2.4x slower) until Cranelift's entry exists; its " + (
        "background compile is running" if running else "compile starts with the next command"
    )


def reap() -> None:
    """Wait for the compiles of ours that ended: every command's prepare asks, since a tool
    on Cranelift's entry never starts another, and one finished would stay a zombie."""
    global _started
    _started = [p for p in _started if p.poll() is None]


def start_background(state: Path) -> int | None:
    """The background compile's pid if this started one; None when one runs already (its
    lock is held) or the entry exists."""
    import fcntl

    reap()
    entry = wasi_module.entry_dir(state, OPTIMIZED)
    fd = private_file(entry / wasi_module.LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # compiling now: in the background, or a command's own compiled()
        if wasi_module.cached(state, OPTIMIZED) is not None:
            return None  # finished between our look and the lock
        log = private_file(
            private_dirs(state / "wasm-runtime") / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        try:
            proc = subprocess.Popen(
                # Absolute: it runs in "/", where a relative `[state] dir` names another place.
                [sys.executable, "-I", "-m", __name__, str(state.absolute()), str(fd)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd="/",
                env={},
                # Its own session: a terminal's Ctrl+C, or the kill of a command's group,
                # does not reach it.
                start_new_session=True,
                pass_fds=(fd,),
            )
        finally:
            os.close(log)
        _started.append(proc)
        return proc.pid
    finally:
        os.close(fd)  # the flock stays with the child's copy of this open file


def _end_when_removed(entry: Path, lock: int) -> None:
    """Ends this compile once its lock file is no longer at its path (the state or the entry
    removed, as a refused entry's recovery says): a command then takes the new file's lock and
    starts another compile, and ours would run beside it for nothing, then rename its module
    into the new entry."""
    held = os.fstat(lock)
    while True:
        try:
            now = os.stat(entry / wasi_module.LOCK_NAME)
            ours = (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
        except OSError:  # gone (or its directory): the entry is no longer ours to fill
            ours = False
        if not ours:
            os._exit(3)
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    """The background compile: the lock is the inherited fd (never taken again here: a
    second open of the file would wait on our own flock)."""
    state, lock = Path(argv[0]), int(argv[1])
    os.set_inheritable(lock, False)
    with contextlib.suppress(ImportError):
        import resource

        # A core of a killed 1 GB compile is no use to anyone and costs the disk.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if wasi_module.cached(state, OPTIMIZED) is None:
        entry = wasi_module.entry_dir(state, OPTIMIZED)
        threading.Thread(target=_end_when_removed, args=(entry, lock), daemon=True).start()
        wasi_module.compile_held(entry, None, OPTIMIZED)
    os.close(lock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
