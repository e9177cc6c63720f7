"""The python arm (CPython wasip1 under wasmtime) against the host's own `python -c pass`.

    python benchmarks/python_arm.py [--reps N] [--cli-reps N]

Prints, in ms (medians), side by side in one run:

- the first command of a fresh state directory: it compiles the 26 MB module (once per
  binary and wasmtime version), against a cached command;
- a cached command in-process, `ExecTool.exec(["python", "-c", "pass"])` (copy sync, the
  runtime's child process, the verified cache mapped, the guest's CPython start, result),
  and the arm alone (`WasiPythonArm.start` -> wait -> finish on a synced copy), against
  `subprocess.run([sys.executable, "-c", "pass"])`;
- the CLI path: `sprawl-orch exec --arm python -- python -c pass` (a config choosing the arm)
  against the host's `python -c pass`, and against the CLI on the copied tree running the same;
- the fuel rate: how much fuel a second of `while True: pass` burns here, to read
  `[sandbox.python] fuel` as seconds.
Ratios are ours / raw.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--cli-reps", type=int, default=10)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sprawl-bench-py-"))
    try:
        tree, state = base / "tree", base / "state"
        tree.mkdir()
        (tree / "a.py").write_text("print('a')\n")
        with ExecTool(config_for(state), tree) as tool:
            first = timed(lambda: tool.exec(PASS))
            ours = [timed(lambda: tool.exec(PASS)) for _ in range(args.reps)]
        raw = [timed(lambda: must([sys.executable, "-c", "pass"])) for _ in range(args.reps)]
        arm = WasiPythonArm(config_for(state).sandbox.python, state)
        copy = base / "copy"
        copy.mkdir()
        sync(tree, copy)
        alone: list[float] = []
        for n in range(args.reps):
            launch = Launch(
                argv=tuple(PASS),
                cwd=copy,
                env={},
                outputs=base / f"out{n}",
                tag=f"b{n}",
                session="bench",
                workdir=tree,
            )

            def one(launch: Launch = launch) -> None:
                running = arm.start(launch)
                running.wait(None)
                running.finish()

            alone.append(timed(one))
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
    finally:
        shutil.rmtree(base, ignore_errors=True)
    m = {
        k: median(v)
        for k, v in {
            "ours": ours,
            "raw": raw,
            "alone": alone,
            "cli_py": cli_py,
            "cli_ct": cli_ct,
            "cli_raw": cli_raw,
        }.items()
    }
    print(f"first command (compile + run):        {first:9.1f} ms")
    print(f"cached command, ExecTool in-process:  {m['ours']:9.1f} ms")
    print(f"  the arm alone (start/wait/finish):  {m['alone']:9.1f} ms")
    print(f"host python -c pass:                  {m['raw']:9.1f} ms")
    print(f"ratio in-process / host python:       {m['ours'] / m['raw']:9.2f}")
    print(f"ratio arm alone / host python:        {m['alone'] / m['raw']:9.2f}")
    print(f"CLI exec, python arm:                 {m['cli_py']:9.1f} ms")
    print(f"CLI exec, copied tree (host python):  {m['cli_ct']:9.1f} ms")
    print(f"ratio CLI python arm / host python:   {m['cli_py'] / m['cli_raw']:9.2f}")
    print(f"ratio CLI python arm / CLI copied:    {m['cli_py'] / m['cli_ct']:9.2f}")
    print(f"fuel rate: {fuel / (loop / 1000):.3g} per second ({fuel} fuel in {loop:.0f} ms)")


if __name__ == "__main__":
    main()
