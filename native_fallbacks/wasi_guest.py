"""`python -I .../wasi_guest.py SPEC`: one python-arm command (run by path: no sprawl_orch import).

A child process of sprawl-orch (issue 31), started as every host command is (its own process
group, announced to the guardian), so a runaway runtime is killed and cleaned like any
command. It maps the verified compiled module, gives the guest its argv, environment, the
copy preopened at the working directory's path and a private empty /tmp -- no other
directory, no socket (WASI preview 1 has no socket constructor; wasmtime's wasip1 hands out
no listening socket unless told to) and no way to start a process -- then meters it: fuel per
operator, a store limit on linear memory, an epoch deadline for wall time. What ended it is
written to the report file; the exit status is the guest's own, or 137 for a limit's trap
(as a command killed at a limit ends on the other arms) and 134 for any other trap.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Only the standard library and wasmtime: this file runs by path in a fresh interpreter per
# command, and importing sprawl_orch there (its package, pydantic) cost 80-560 ms of the
# command on the loaded 2-core machine (benchmarks/python_arm.py).
_CHUNK = 1 << 20


class CacheRefused(Exception):
    """The compiled module failed its check; wasi_module turns it into E_SANDBOX_DENIED."""


@dataclass(frozen=True)
class Compiled:
    """One cache entry: the serialized module and the SHA-256 of its bytes."""

    path: Path
    sha256: str
    compiler: str = "cranelift"  # its engine must be made by the same (make_engine)


def engine_settings() -> dict[str, bool]:
    """What shapes the compiled code: a module compiled without fuel would run unmetered."""
    return {"consume_fuel": True, "epoch_interruption": True}


# wasmtime's compilers: Cranelift optimizes; Winch (baseline) compiles in ~1/5 the CPU, its
# code runs 1.8-2.4x slower (wasi_tiering.py). A module loads only in an engine of its own.
COMPILERS = ("cranelift", "winch")
_WINCH = 2  # the C API's WASMTIME_STRATEGY_WINCH; wasmtime-py 50's setter knows no "winch"
MADE_BY = ["cranelift"]


def make_engine(compiler: str = "cranelift") -> object:
    import wasmtime

    config = wasmtime.Config()
    for key, value in engine_settings().items():
        setattr(config, key, value)
    MADE_BY[0] = compiler  # said in each report (drive): one engine per process
    if compiler == "winch":
        from wasmtime import _ffi

        _ffi.wasmtime_config_strategy_set(config.ptr(), _WINCH)
    elif compiler != "cranelift":
        raise ValueError(f"unknown compiler {compiler!r}: one of {COMPILERS}")
    return wasmtime.Engine(config)


def open_verified(entry: Compiled) -> int:
    """verified_copy's fd."""
    return verified_copy(entry)[0]


def file_stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def verified_copy(entry: Compiled) -> tuple[int, tuple[int, ...]]:
    """An fd of the cache entry's bytes, checked: a regular file of ours, no one else's to
    write, its bytes' SHA-256 the one recorded; and the file's state before it was read.

    Where there are memfds (Linux) the fd is a sealed copy of the bytes hashed: the runtime
    mapped the cache file itself, MAP_PRIVATE, and a write in place after the check changed
    the native code every later fork ran (atkpy: /proc/<runtime>/mem followed the file).
    Sealed, nothing can write the bytes the runtime maps. Elsewhere, the file's own fd."""
    fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    copy = -1
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise CacheRefused(f"not a private file of this user (mode {st.st_mode:o})")
        if hasattr(os, "memfd_create"):
            copy = os.memfd_create("sprawl-wasm-module", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        h = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
            view = memoryview(chunk)
            while copy >= 0 and view:
                view = view[os.write(copy, view) :]
        if h.hexdigest() != entry.sha256:
            raise CacheRefused(f"SHA-256 {h.hexdigest()}, recorded {entry.sha256}")
        if copy < 0:
            os.lseek(fd, 0, os.SEEK_SET)
            return fd, file_stamp(st)
        import fcntl

        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        fcntl.fcntl(copy, fcntl.F_ADD_SEALS, seals)
        os.lseek(copy, 0, os.SEEK_SET)
        os.close(fd)
        return copy, file_stamp(st)
    except BaseException:
        os.close(fd)
        if copy >= 0:
            os.close(copy)
        raise


LIMIT_EXIT = 137
TRAP_EXIT = 134
# The guest's memory ended this close to its cap: the last grow was refused at the cap
# (wasmtime's Python API has no trap-on-grow-failure; CPython then raises MemoryError or
# aborts). CPython grows its heap in steps of at most a few MiB, so 8 MiB is a refusal's mark.
MEMORY_MARK = 8 * 1024 * 1024
# Epoch interruption is checked only while wasm runs: a guest blocked in a host call
# (`time.sleep(3600)` is WASI poll_oneoff) slept past wall_seconds until the window
# (atk-wasm break 1). This long after the epoch moved, the runtime ends itself instead.
BLOCKED_GRACE = 2.0
# The guest's /tmp is a host directory, where the other arms' is a tmpfs charged to the
# command's memory: 8x memory_bytes landed on the host's disk (atk-wasm break 2). A watcher
# sums its allocated bytes this often and ends the guest past memory_bytes; what a guest can
# write between two looks (~disk speed x the period) is the overshoot.
TMP_POLL = 0.02


# What one entry costs at least, as a tmpfs inode costs the kernel memory: 50 000 empty
# files held no bytes, so nothing bounded their number (atk-wasm, left open at first).
ENTRY_FLOOR = 512


def tmp_bytes(root: str) -> int:
    """Allocated bytes under `root` (as df counts them, each entry at least ENTRY_FLOOR),
    never following a link."""
    total = 0
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                total += max(os.lstat(os.path.join(top, name)).st_blocks * 512, ENTRY_FLOOR)
            except OSError:  # gone since the listing (the guest deleted it): not counted
                continue
    return total


BLOCKED_TRAP = (
    "wall time: the guest was still blocked in a host call (a sleep or a wait) "
    "wall_seconds after it started; the runtime ended it"
)

# Runs first in the guest: WASI preview 1 has no working directory (wasi-libc starts at "/",
# and ignores PWD), so the bootstrap changes into the preopened working directory, puts the
# tree's virtualenv site-packages on the path (pure-Python packages import; a C extension is
# refused by the finder appended last, saying why, where CPython would only say "No module
# named ..."), then runs the script as __main__ or the -c code as `python -c` would, in the
# globals of a __main__ without the bootstrap's names (_FREEZE). Its cost is fuel, which is
# time (issue 31; docs/python.md "Speed"): the builtin compile() builds the AST types first
# (51M fuel), so -c code runs by exec(str), as CPython's own -c does; a script is compiled
# (its filename must be in its code; a prepared guest built the AST types in its start) but
# without runpy (~400M fuel: its imports), kept for a directory or a zip with a __main__.py.
# A script's sys.argv[0] is as typed, __file__ is the working directory joined to it,
# unnormalized, sys.path[0] its real directory, a missing one exits 2 with CPython's message,
# and sys.orig_argv is the command's (no bootstrap): all as CPython sets them.
_BOOT = """\
import os as _o, sys as _s
_o.chdir(_s.argv.pop(1))
_s.path.extend(p for p in _s.argv.pop(1).split("\\n") if p)
class _NativeRefused:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        import os, sys
        leaf = name.rpartition(".")[2]
        for d in path or sys.path:
            try:
                names = os.listdir(d or ".")
            except OSError:  # gone since the listing (the guest deleted it): not counted
                continue
            if any(n.startswith(leaf + ".") and n.endswith((".so", ".pyd")) for n in names):
                raise ImportError(
                    f"{name} is a C extension ({d}): the python arm's WebAssembly CPython "
                    "cannot load native code; run it on the native or container arm",
                    name=name,
                )
        return None
_s.meta_path.append(_NativeRefused)
_s.orig_argv[1:] = _s.argv = _s.argv[1:]
"""
# The start's objects frozen (gc.freeze): CPython's exit collects every object several times,
# ~36M of a served -c pass's ~49M fuel after its hand-off; frozen ones are skipped (absent
# from gc.get_objects(); `gc` left out of sys.modules). The command's __main__ is made after
# it: a frozen one kept what the command left in its globals from the exit's first
# collection (a cycle's __del__ never ran).
_FREEZE = """\
import gc as _g
_g.freeze()
del _g, _s.modules["gc"]
_s.modules["__main__"] = type(_s)("__main__")
_s.modules["__main__"].__dict__.update((k, v) for k, v in globals().items() if k[:2] == "__")
"""
# The -c code's end and the script's: each command's bootstrap carries only its own (CPython
# compiles all of it before it runs: the other form's lines cost -c pass 5M fuel).
_RUN_CODE = """\
exec(_s.argv.pop(1), _s.modules["__main__"].__dict__)
"""
_RUN_SCRIPT = """\
_p = _o.path.join(_o.getcwd(), _s.argv[0])
try:
    with open(_s.argv[0], "rb") as _f:
        _c = _f.read()
except IsADirectoryError:
    _c = b"PK\\x03\\x04"
except OSError as _e:
    _s.stderr.write(
        f"{_s.orig_argv[0]}: can't open file {_p!r}: [Errno {_e.errno}] {_e.strerror}\\n"
    )
    raise SystemExit(2)
_s.path[0] = _o.path.dirname(_o.path.realpath(_s.argv[0]))
if _c.startswith(b"PK\\x03\\x04"):
    import runpy as _r
    _r.run_path(_s.argv[0], run_name="__main__")
else:
    _s.modules["__main__"].__dict__.update(__file__=_p, __cached__=None)
    exec(compile(_c, _p, "exec"), _s.modules["__main__"].__dict__)
"""


def guest_argv(workdir: str, argv: list[str], sites: list[str] | None = None) -> list[str]:
    """`python -c CODE ARGS` or `python SCRIPT ARGS` as the guest interpreter's argv; `sites`:
    guest paths of the tree's virtualenv site-packages."""
    boot = _BOOT + _FREEZE + (_RUN_CODE if argv[1] == "-c" else _RUN_SCRIPT)
    return ["python", "-c", boot, workdir, "\n".join(sites or ()), *argv[1:]]


def load(spec: dict[str, Any]) -> tuple[Any, Any]:
    """The engine and the module of the fd sprawl-orch verified (wasi_module.VerifiedModule),
    inherited: the bytes hashed are the bytes mapped. /dev/fd/N opens that same file."""
    import wasmtime

    engine = make_engine(str(spec.get("compiler", "cranelift")))
    fd = int(spec["module_fd"])
    module = wasmtime.Module.deserialize_file(engine, f"/dev/fd/{fd}")  # type: ignore[arg-type]
    os.close(fd)
    return engine, module


def run(spec: dict[str, Any], loaded: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """One guest in a fresh Store and instance; `loaded`: the engine and module a runtime
    process (wasi_runtime.py) loaded once before it forked this process, else load here."""
    engine, module = loaded or load(spec)
    argv = guest_argv(spec["workdir"], spec["argv"], spec.get("sites"))
    store, instance = instantiate(engine, module, spec, spec["fuel"], wasi_config(spec, argv))
    meter = Meter(engine)
    meter.begin(spec)
    return drive(store, instance, meter, spec["memory_bytes"], spec["fuel"])


def wasi_config(
    spec: dict[str, Any],
    argv: list[str],
    copy: str | None = None,
    tmp: str | None = None,
    stdin: str | None = None,
) -> Any:
    """The guest's argv, environment, the copy preopened at the working directory's path and
    its /tmp; stdin empty unless `stdin` (a path) is given (wasi_prepared.py's command pipe).
    wasmtime opens each path here, when it is set."""
    import wasmtime

    wasi = wasmtime.WasiConfig()
    wasi.argv = argv
    wasi.env = [(k, v) for k, v in spec["env"].items()]
    wasi.preopen_dir(copy or spec["copy"], spec["workdir"])
    wasi.preopen_dir(tmp or spec["tmp"], "/tmp")
    if stdin is not None:
        wasi.stdin_file = stdin
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    return wasi


def instantiate(
    engine: Any, module: Any, spec: dict[str, Any], fuel: int, wasi: Any
) -> tuple[Any, Any]:
    """A fresh Store (its fuel, memory limit and epoch deadline) and instance."""
    import wasmtime

    assert isinstance(engine, wasmtime.Engine) and isinstance(module, wasmtime.Module)
    store = wasmtime.Store(engine)
    store.set_fuel(fuel)
    store.set_limits(memory_size=spec["memory_bytes"])
    store.set_epoch_deadline(1)
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    return store, linker.instantiate(store, module)


class Meter:
    """One command's wall-time deadline and /tmp watcher, started (begin) once its spec is
    known: at once for a guest started for it, at hand-off for a prepared one."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.ended = threading.Event()
        self.ending = threading.Lock()
        self.began: float | None = None
        self.marks: dict[str, Any] = {}  # in every report, the deadline's too (wasi_prepared)
        self._timer: threading.Timer | None = None

    def begin(self, spec: dict[str, Any]) -> None:
        timer = threading.Timer(spec["wall_seconds"], self._deadline, (spec,))
        timer.daemon = True
        self._timer = timer
        self.began = time.monotonic()
        timer.start()
        threading.Thread(target=self._watch_tmp, args=(spec,), daemon=True).start()

    def end(self) -> None:
        with self.ending:
            self.ended.set()
        if self._timer is not None:
            self._timer.cancel()

    def _deadline(self, spec: dict[str, Any]) -> None:
        self.engine.increment_epoch()
        if self.ended.wait(BLOCKED_GRACE):
            return
        with self.ending:
            if self.ended.is_set():
                return
            # The store is the main thread's (inside the host call): no fuel or memory read.
            report = {"exit_code": LIMIT_EXIT, "trap": BLOCKED_TRAP, "limit": "time", **self.marks}
            Path(spec["report"]).write_text(json.dumps(report), encoding="utf-8")
            os._exit(LIMIT_EXIT)

    def _watch_tmp(self, spec: dict[str, Any]) -> None:
        pause = TMP_POLL
        while not self.ended.wait(pause):
            began = time.monotonic()
            held = tmp_bytes(spec["tmp"])
            # A /tmp of many entries takes long to sum: look less often, so the watcher (host
            # CPU no fuel counts) stays under a fifth of a core (50 000 files ran for minutes).
            pause = max(TMP_POLL, 4 * (time.monotonic() - began))
            if held <= spec["memory_bytes"]:
                continue
            with self.ending:
                if self.ended.is_set():
                    return
                trap = (
                    f"the guest's /tmp held {held} bytes, past memory_bytes "
                    f"{spec['memory_bytes']} (a tmpfs on the other arms, charged to memory)"
                )
                report = {"exit_code": LIMIT_EXIT, "trap": trap, "limit": "memory", **self.marks}
                Path(spec["report"]).write_text(json.dumps(report), encoding="utf-8")
                os._exit(LIMIT_EXIT)


def drive(store: Any, instance: Any, meter: Meter, memory_bytes: int, fuel: int) -> dict[str, Any]:
    """Run the guest's `_start` to its end; what ended it, as the report. `fuel`: what the
    store was given."""
    import wasmtime

    report: dict[str, Any] = {"exit_code": 0, "trap": None, "limit": None}
    start = instance.exports(store)["_start"]
    assert isinstance(start, wasmtime.Func)
    run_began = time.monotonic()
    try:
        start(store)
    except wasmtime.ExitTrap as err:
        report["exit_code"] = err.code
    except wasmtime.Trap as err:
        code = err.trap_code
        limit = (
            {
                wasmtime.TrapCode.OUT_OF_FUEL: "fuel",
                wasmtime.TrapCode.INTERRUPT: "time",
            }.get(code)
            if code is not None
            else None
        )
        report["trap"] = err.message.split("\n\nCaused by:\n")[-1].strip()
        report["limit"] = limit
        report["exit_code"] = LIMIT_EXIT if limit else TRAP_EXIT
    except wasmtime.WasmtimeError as err:
        # Not a Trap: wasmtime's proc_exit refuses a status outside [0, 126) with a plain
        # error, so `sys.exit(255)` in the guest ended the runtime with a traceback and the
        # result said "runtime_failed" (atkpy). It is the guest's own doing: a trap, 134.
        report["trap"] = str(err).split("\n\nCaused by:\n")[-1].strip()
        report["exit_code"] = TRAP_EXIT
    finally:
        meter.end()
    report["compiler"] = MADE_BY[0]
    # The guest's own run, for benchmarks/python_arm.py (what the command costs around it).
    report["guest_ms"] = round((time.monotonic() - (meter.began or run_began)) * 1000, 1)
    memory = instance.exports(store)["memory"]
    assert isinstance(memory, wasmtime.Memory)
    report["memory_bytes_at_end"] = memory.data_len(store)
    report["fuel_used"] = fuel - store.get_fuel()
    if report["limit"] is None and report["memory_bytes_at_end"] + MEMORY_MARK > memory_bytes:
        report["limit"] = "memory"
    return report


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    report = run(spec)
    Path(spec["report"]).write_text(json.dumps(report), encoding="utf-8")
    return int(report["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
