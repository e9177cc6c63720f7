"""The python arm's compile against its guest's speed, per wasmtime compiler (issue 31).

    python benchmarks/python_compilers.py [--only NAME ...] [--reps N]

For each engine configuration, side by side in one process on the pinned CPython binary:
today's (Cranelift, opt level "speed", fuel + epoch interruption), Cranelift at opt level
"none", and Winch (wasmtime's baseline compiler), all with fuel and epochs:

- the compile (`wasmtime.Module(engine, bytes)` + serialize, as wasi_module._compile does), in
  CPU seconds (getrusage: every compiler thread of this process) and wall; the .cwasm's size
  and its deserialize (what each runtime process pays);
- the guest's `python -c pass` and a small CPU-heavy script (fresh Store each, as the runtime
  runs a command): CPU seconds of the thread that ran `_start`, wall, and fuel used;
- that the limits still reach the report as themselves: fuel exhaustion ("fuel"), an epoch
  deadline ("time") and the memory cap ("memory").

The load (`os.getloadavg`) is printed before and after: read ratios, never absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from typing import Any

from sprawl_orch.native_fallbacks import wasi_guest
from sprawl_orch.native_fallbacks.wasi_module import verified_binary

CONFIGS: dict[str, dict[str, Any]] = {
    "cranelift-speed (today)": {},
    "cranelift-none": {"cranelift_opt_level": "none"},
    "winch": {"strategy": "winch"},
}
HEAVY = """\
d = {}
for i in range(200000):
    d[i % 997] = d.get(i % 997, 0) + i * i
s = "".join(str(v) for v in d.values())
print(len(s), sum(sorted(d.values())[:10]))
"""


def make_engine(extra: dict[str, Any]) -> Any:
    import wasmtime

    config = wasmtime.Config()
    for key, value in {**wasi_guest.engine_settings(), **extra}.items():
        if key == "strategy" and value == "winch":
            # wasmtime-py 50.0.1's setter knows only "auto" and "cranelift"; the C API's
            # WASMTIME_STRATEGY_WINCH is 2, and the bundled library is built with Winch.
            from wasmtime import _ffi

            _ffi.wasmtime_config_strategy_set(config.ptr(), 2)
            continue
        setattr(config, key, value)
    return wasmtime.Engine(config)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def compile_module(extra: dict[str, Any], data: bytes) -> tuple[Any, Any, float, float, int, float]:
    import wasmtime

    engine = make_engine(extra)
    c0, w0 = cpu(), time.monotonic()
    blob = wasmtime.Module(engine, data).serialize()  # type: ignore[arg-type]
    c1, w1 = cpu(), time.monotonic()
    # What every runtime process pays to map it (from bytes here; the runtime maps a memfd).
    w2 = time.monotonic()
    module = wasmtime.Module.deserialize(engine, blob)
    return engine, module, c1 - c0, w1 - w0, len(blob), time.monotonic() - w2


def guest(
    engine: Any, module: Any, argv: list[str], fuel: int, memory: int, wall: float
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as copy, tempfile.TemporaryDirectory() as tmp:
        spec = {
            "copy": copy,
            "tmp": tmp,
            "workdir": "/work",
            "env": {},
            "memory_bytes": memory,
            "wall_seconds": wall,
            "report": os.path.join(tmp, "report.json"),
            "fuel": fuel,
        }
        args = wasi_guest.guest_argv("/work", argv)
        wasi = wasi_guest.wasi_config(spec, args)
        store, instance = wasi_guest.instantiate(engine, module, spec, fuel, wasi)
        meter = wasi_guest.Meter(engine)
        meter.begin(spec)
        t0 = time.thread_time()
        report = wasi_guest.drive(store, instance, meter, memory, fuel)
        report["cpu_s"] = round(time.thread_time() - t0, 3)
        return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=list(CONFIGS))
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    data = verified_binary().read_bytes()
    print(f"load before: {os.getloadavg()}", flush=True)
    big, mib = 400_000_000_000, 1 << 20
    for name in args.only:
        extra = CONFIGS[name]
        try:
            engine, module, ccpu, cwall, size, load = compile_module(extra, data)
        except Exception as err:  # a configuration wasmtime refuses is a result here
            print(f"{name}: compile failed: {err}", flush=True)
            continue
        out: dict[str, Any] = {"compile_cpu_s": round(ccpu, 2), "compile_wall_s": round(cwall, 2)}
        out["cwasm_mb"], out["load_ms"] = round(size / mib, 1), round(load * 1000)
        for label, argv in (("pass", ["python", "-c", "pass"]), ("heavy", ["python", "-c", HEAVY])):
            runs = [guest(engine, module, argv, big, 256 * mib, 60) for _ in range(args.reps)]
            bad = [r for r in runs if r["exit_code"] != 0]
            out[label] = {
                "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                "wall_ms": statistics.median(r["guest_ms"] for r in runs),
                "fuel": runs[0]["fuel_used"],
                "failed": [(r["exit_code"], r["trap"]) for r in bad],
            }
        spin = ["python", "-c", "while True: pass"]
        fuel_r = guest(engine, module, ["python", "-c", "pass"], 10_000_000, 256 * mib, 60)
        time_r = guest(engine, module, spin, big, 256 * mib, 1.0)
        grow = ["python", "-c", "b = [bytearray(mib) for _ in range(400)]".replace("mib", str(mib))]
        mem_r = guest(engine, module, grow, big, 64 * mib, 60)
        out["limits"] = {
            k: (r["exit_code"], r["limit"], (r["trap"] or "")[:60])
            for k, r in (("fuel", fuel_r), ("time", time_r), ("memory", mem_r))
        }
        print(f"{name}: {json.dumps(out)}", flush=True)
    print(f"load after: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
