"""The python arm (CPython wasip1 under wasmtime) against the host's own `python -c pass`.

    python benchmarks/python_arm.py [--reps N] [--cli-reps N]

Prints, in ms (medians), side by side in one run, with the load (`os.getloadavg`) before and
after:

- the first command of a fresh state directory in two parts: the compile
  (`wasi_tiering.choose` on an empty cache: Winch's, once per binary, wasmtime version and
  engine settings), then its command (the runtime process's start: it loads the module; the
  run); and how long until the Cranelift entry its background compile makes exists (the
  rest is measured on it);
- a cached command in-process, `ExecTool.exec(["python", "-c", "pass"])` (copy sync, a fork
  of the arm's runtime process, a fresh Store and instance, the guest's CPython start,
  result), and the in-process cost around the guest: that time less the guest's own run
  (`python.guest_ms`, the `_start` call as the forked child timed it);
- the arm alone (`WasiPythonArm.start` -> wait -> finish on a synced copy), forked, and with
  a Python per command (the path where there is no fork: wasi_guest.py run by path), against
  `subprocess.run([sys.executable, "-c", "pass"])`;
- the CLI path: `sprawl-orch exec -- python -c pass` (a config choosing the arm) against the
  host's `python -c pass`, and against the CLI on the copied tree running the same: in-process
  (`main()` in a fresh Python: the runtime started per call), and served -- the `sprawl-orch`
  program, a thin client, through its exec server, which holds one runtime for every call
  (native_fallbacks/wasi_shared.py; the path of the day), served also for a script
  (`python a.py`, whose bootstrap compiles a file);
- the fuel rate: how much fuel a second of `while True: pass` burns here, to read
  `[sandbox.python] fuel` as seconds.
Ratios are ours / raw.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.config import Config
from sprawl_orch.copy.sync import sync
from sprawl_orch.native_fallbacks import wasi_forked, wasi_module, wasi_tiering
from sprawl_orch.native_fallbacks.wasi_python import WasiPythonArm
from sprawl_orch.runs.launch import Launch
from sprawl_orch.tool.exec_tool import ExecTool

PASS = ["python", "-c", "pass"]


def timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1000


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def must(argv: list[str], cwd: Path | None = None) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, cwd=cwd, capture_output=True)


def config_for(state: Path, arm: str = "python", fuel: int | None = None) -> Config:
    python = {"fuel": fuel} if fuel else {}
    return Config(sandbox={"arm": arm, "python": python}, state={"dir": str(state)})


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def arm_alone(arm: WasiPythonArm, tree: Path, base: Path, reps: int, tag: str) -> list[float]:
    copy = base / f"copy-{tag}"
    copy.mkdir()
    sync(tree, copy)
    alone: list[float] = []
    for n in range(reps):
        launch = Launch(
            argv=tuple(PASS),
            cwd=copy,
            env={},
            outputs=base / f"out-{tag}{n}",
            tag=f"{tag}{n}",
            session="bench",
            workdir=tree,
        )

        def one(launch: Launch = launch) -> None:
            running = arm.start(launch)
            running.wait(None)
            running.finish()

        alone.append(timed(one))
    return alone


def served(base: Path, tree: Path, reps: int) -> dict[str, list[float]]:
    """The `sprawl-orch` program through its exec server (a private runtime directory, so a
    server of its own): warmed first (the server started, its runtime loaded)."""
    program = str(Path(sys.executable).with_name("sprawl-orch"))
    run_dir = base / "run"
    run_dir.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(run_dir), "SPRAWL_EXEC_SERVER_IDLE": "300"}
    env.pop("SPRAWL_EXEC_SERVER", None)

    def call(name: str, argv: list[str]) -> None:
        subprocess.run(
            [program, "exec", "--config", str(base / f"{name}.toml"), "-C", str(tree), "--", *argv],
            check=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
        )

    host = [sys.executable, "-c", "pass"]
    try:
        for _ in range(3):  # the server's start, then its runtime's load
            call("python", PASS)
            call("copied_tree", host)
        times: dict[str, list[float]] = {"py": [], "script": [], "ct": [], "raw": []}
        for _ in range(reps):  # interleaved: the load drifts alike for all four
            times["py"].append(timed(lambda: call("python", PASS)))
            times["script"].append(timed(lambda: call("python", ["python", "a.py"])))
            times["ct"].append(timed(lambda: call("copied_tree", host)))
            times["raw"].append(timed(lambda: must(host)))
        return times
    finally:
        subprocess.run([program, "server", "stop"], env=env, capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--cli-reps", type=int, default=10)
    parser.add_argument(
        "--cache-from",
        type=Path,
        help="a state directory whose compiled module to copy in (no compile measured: on a "
        "loaded machine it takes minutes)",
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sprawl-bench-py-"))
    try:
        tree, state = base / "tree", base / "state"
        tree.mkdir()
        (tree / "a.py").write_text("print('a')\n")
        load_before = load()
        # The first command's compile alone, then the rest of that first command.
        if args.cache_from is not None:
            state.mkdir(mode=0o700)
            shutil.copytree(args.cache_from / "wasm-cache", state / "wasm-cache")
        began = time.perf_counter()
        compile_ms = timed(lambda: wasi_tiering.choose(state))
        quick = wasi_module.cached(state, wasi_tiering.OPTIMIZED) is None
        around: list[float] = []
        with ExecTool(config_for(state), tree) as tool:
            first = timed(lambda: tool.exec(PASS))
            wasi_module.compiled(state)  # waits for the background compile's entry
            optimized_ms = (time.perf_counter() - began) * 1000
            ours = []
            for _ in range(args.reps):
                start = time.perf_counter()
                result = tool.exec(PASS)
                took = (time.perf_counter() - start) * 1000
                ours.append(took)
                assert result.exit_code == 0 and result.python is not None, result
                around.append(took - float(result.python["guest_ms"]))
        raw = [timed(lambda: must([sys.executable, "-c", "pass"])) for _ in range(args.reps)]
        forked = WasiPythonArm(config_for(state).sandbox.python, state)
        alone = arm_alone(forked, tree, base, args.reps, "f")
        forked.close()
        usable = wasi_forked.usable
        wasi_forked.usable = lambda: False  # the path without fork: a Python per command
        try:
            per_command = WasiPythonArm(config_for(state).sandbox.python, state)
            alone_pc = arm_alone(per_command, tree, base, args.cli_reps, "p")
            per_command.close()
        finally:
            wasi_forked.usable = usable
        fuel = 20_000_000_000
        with ExecTool(config_for(state, fuel=fuel), tree) as tool:
            loop = timed(lambda: tool.exec(["python", "-c", "while True: pass"]))
        cli = [
            sys.executable,
            "-c",
            "import sys; from sprawl_orch.cli import main; sys.argv[0] = 'sprawl-orch'; main()",
        ]
        for name, body in (
            ("python", '[sandbox]\narm = "python"\n'),
            ("copied_tree", '[sandbox]\narm = "copied_tree"\n'),
        ):
            (base / f"{name}.toml").write_text(body + f'[state]\ndir = "{state}"\n')
        cli_py = [
            timed(
                lambda: must(
                    [
                        *cli,
                        "exec",
                        "--config",
                        str(base / "python.toml"),
                        "-C",
                        str(tree),
                        "--",
                        *PASS,
                    ]
                )
            )
            for _ in range(args.cli_reps)
        ]
        cli_ct = [
            timed(
                lambda: must(
                    [
                        *cli,
                        "exec",
                        "--config",
                        str(base / "copied_tree.toml"),
                        "-C",
                        str(tree),
                        "--",
                        sys.executable,
                        "-c",
                        "pass",
                    ]
                )
            )
            for _ in range(args.cli_reps)
        ]
        cli_raw = [
            timed(lambda: must([sys.executable, "-c", "pass"])) for _ in range(args.cli_reps)
        ]
        srv = served(base, tree, args.cli_reps)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    m = {
        k: median(v)
        for k, v in {
            "ours": ours,
            "raw": raw,
            "alone": alone,
            "alone_pc": alone_pc,
            "around": around,
            "cli_py": cli_py,
            "cli_ct": cli_ct,
            "cli_raw": cli_raw,
            "srv_py": srv["py"],
            "srv_script": srv["script"],
            "srv_ct": srv["ct"],
            "srv_raw": srv["raw"],
        }.items()
    }
    print(f"load (1/5/15 min) before: {load_before}; after: {load()}")
    what = "cache copied in, no compile" if args.cache_from else "empty cache"
    compiler = wasi_tiering.QUICK if quick else wasi_tiering.OPTIMIZED
    print(f"compile alone ({what}, {compiler}): {compile_ms:9.1f} ms")
    print(f"  first command after it (runtime start + run): {first:6.1f} ms")
    if quick:
        print(
            f"  Cranelift entry there (background), from the compile's start: "
            f"{optimized_ms:9.1f} ms"
        )
    print(f"cached command, ExecTool in-process:  {m['ours']:9.1f} ms")
    print(f"  in-process cost around the guest:   {m['around']:9.1f} ms")
    print(f"  the arm alone, forked:              {m['alone']:9.1f} ms")
    print(f"  the arm alone, a Python per command:{m['alone_pc']:9.1f} ms")
    print(f"host python -c pass:                  {m['raw']:9.1f} ms")
    print(f"ratio in-process / host python:       {m['ours'] / m['raw']:9.2f}")
    print(f"ratio arm alone / host python:        {m['alone'] / m['raw']:9.2f}")
    print(f"ratio per-command Python / forked:    {m['alone_pc'] / m['alone']:9.2f}")
    print(f"CLI exec, python arm:                 {m['cli_py']:9.1f} ms")
    print(f"CLI exec, copied tree (host python):  {m['cli_ct']:9.1f} ms")
    print(f"ratio CLI python arm / host python:   {m['cli_py'] / m['cli_raw']:9.2f}")
    print(f"ratio CLI python arm / CLI copied:    {m['cli_py'] / m['cli_ct']:9.2f}")
    print(f"served CLI (exec server), python arm: {m['srv_py']:9.1f} ms")
    print(f"served CLI, copied tree (host python):{m['srv_ct']:9.1f} ms")
    print(f"  host python -c pass, same rounds:   {m['srv_raw']:9.1f} ms")
    print(f"ratio served python arm / host python:{m['srv_py'] / m['srv_raw']:9.2f}")
    print(f"  served python a.py (a script):      {m['srv_script']:9.1f} ms")
    print(f"ratio served script / host python:    {m['srv_script'] / m['srv_raw']:9.2f}")
    print(f"ratio served python arm / served copied:{m['srv_py'] / m['srv_ct']:7.2f}")
    print(f"served python arm less the arm alone: {m['srv_py'] - m['alone']:9.1f} ms")
    print(f"fuel rate: {fuel / (loop / 1000):.3g} per second ({fuel} fuel in {loop:.0f} ms)")


if __name__ == "__main__":
    main()
