"""`python -I -m sprawl_orch.native_fallbacks.wasi_guest SPEC`: one python-arm command.

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

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.native_fallbacks.wasi_module import Compiled, make_engine, open_verified

LIMIT_EXIT = 137
TRAP_EXIT = 134
# The guest's memory ended this close to its cap: the last grow was refused at the cap
# (wasmtime's Python API has no trap-on-grow-failure; CPython then raises MemoryError or
# aborts). CPython grows its heap in steps of at most a few MiB, so 8 MiB is a refusal's mark.
MEMORY_MARK = 8 * 1024 * 1024

# Runs first in the guest: WASI preview 1 has no working directory (wasi-libc starts at "/",
# and ignores PWD), so the bootstrap changes into the preopened working directory, puts the
# tree's virtualenv site-packages on the path (pure-Python packages import; a C extension is
# refused by the finder appended last, saying why, where CPython would only say "No module
# named ..."), then runs the script as __main__ or the -c code as `python -c` would.
_BOOT = """\
import os as _o, sys as _s
_o.chdir(_s.argv.pop(1))
_s.path.extend(p for p in _s.argv.pop(1).split("\\n") if p)
class _NativeRefused:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        leaf = name.rpartition(".")[2]
        for d in path or _s.path:
            try:
                names = _o.listdir(d or ".")
            except OSError:
                continue
            if any(n.startswith(leaf + ".") and n.endswith((".so", ".pyd")) for n in names):
                raise ImportError(
                    f"{name} is a C extension ({d}): the python arm's WebAssembly CPython "
                    "cannot load native code; run it on the native or container arm",
                    name=name,
                )
        return None
_s.meta_path.append(_NativeRefused)
if _s.argv[1] == "-c":
    _c = _s.argv[2]
    _s.argv = ["-c", *_s.argv[3:]]
    exec(compile(_c, "<string>", "exec"))
else:
    import runpy as _r
    _s.argv = _s.argv[1:]
    _s.path[0] = _o.path.dirname(_o.path.abspath(_s.argv[0]))
    _r.run_path(_s.argv[0], run_name="__main__")
"""


def guest_argv(workdir: str, argv: list[str], sites: list[str] | None = None) -> list[str]:
    """`python -c CODE ARGS` or `python SCRIPT ARGS` as the guest interpreter's argv; `sites`:
    guest paths of the tree's virtualenv site-packages."""
    return ["python", "-c", _BOOT, workdir, "\n".join(sites or ()), *argv[1:]]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import wasmtime

    entry = Compiled(Path(spec["module"]), spec["module_sha256"])
    engine = make_engine()
    assert isinstance(engine, wasmtime.Engine)
    fd = open_verified(entry)
    try:
        # Mapped through the checked fd: the bytes hashed are the bytes loaded.
        module = wasmtime.Module.deserialize_file(engine, f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    store = wasmtime.Store(engine)
    store.set_fuel(spec["fuel"])
    store.set_limits(memory_size=spec["memory_bytes"])
    store.set_epoch_deadline(1)
    timer = threading.Timer(spec["wall_seconds"], engine.increment_epoch)
    timer.daemon = True
    wasi = wasmtime.WasiConfig()
    wasi.argv = guest_argv(spec["workdir"], spec["argv"], spec.get("sites"))
    wasi.env = [(k, v) for k, v in spec["env"].items()]
    wasi.preopen_dir(spec["copy"], spec["workdir"])
    wasi.preopen_dir(spec["tmp"], "/tmp")
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    instance = linker.instantiate(store, module)
    report: dict[str, Any] = {"exit_code": 0, "trap": None, "limit": None}
    start = instance.exports(store)["_start"]
    assert isinstance(start, wasmtime.Func)
    timer.start()
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
    finally:
        timer.cancel()
    memory = instance.exports(store)["memory"]
    assert isinstance(memory, wasmtime.Memory)
    report["memory_bytes_at_end"] = memory.data_len(store)
    report["fuel_used"] = spec["fuel"] - store.get_fuel()
    if (
        report["limit"] is None
        and report["memory_bytes_at_end"] + MEMORY_MARK > spec["memory_bytes"]
    ):
        report["limit"] = "memory"
    return report


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    try:
        report = run(spec)
    except SprawlError as err:
        # The guest never ran (the cache failed its check): the result is this refusal.
        refused = {k: str(getattr(err, k)) for k in ("code", "subject", "detail", "recovery")}
        report = {"exit_code": 125, "refused": refused}
    Path(spec["report"]).write_text(json.dumps(report), encoding="utf-8")
    return int(report["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
