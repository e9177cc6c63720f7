"""Warm mode's per-command cost against the raw mechanisms, side by side in one run (issue 15).

    . .ci/env && python benchmarks/warm_exec.py [--reps N] [--engines docker,podman]

Per engine, with the same busybox image, interleaved (warm, exec_run, fresh, run --rm, …):
- warm:     ExecTool.exec(["true"]) with `[sandbox.container] warm = true`: the full command
            as the library and serve/mcp pay it (resync of the copy, checks of the kept
            container, the exec, the kill/clean-up of everything the command left, result).
- exec:     docker: the SDK's `exec_run("true")` into a plain running container (create,
            start, inspect of the exec); podman: `podman exec` (its CLI: no API socket here).
- fresh:    ExecTool.exec(["true"]) without warm: a fresh, verified container per command.
- run --rm: `docker run --rm IMAGE true` / `podman run --rm IMAGE true` (the CLI).
Prints medians in ms and the ratios; the target is warm/exec <= 1.5.

With --cli (issue 26's served warm call), per engine, interleaved in the same run:
- exec (CLI):      `docker exec` / `podman exec` into the plain running container;
- served warm:     `sprawl-orch exec -C tree --config warm.toml -- true` through the exec
                   server (client/exec_client.py): a kept container after the first call
                   (core/served_warm.py);
- client start:    a client's interpreter, imports and connect to the running server;
- python -c pass;
- served floor:    client start + the library's warm command (both medians): the least a
                   served warm call can cost (the server hands the fork a kept container).
Targets (issue 26): served warm <= 0.5x `run --rm` and <= 1.2x `exec` (the CLI).
Run from an editable install (`pip install -e`), every row that starts a Python process pays
setuptools' editable finder at `site` (~40 ms at load 4-9, `python -X importtime`): a
`pip install .` venv's client does not (docs/warm.md).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.config import parse_config
from sprawl_orch.images.build import build_busybox
from sprawl_orch.tool.exec_tool import ExecTool

Times = dict[str, list[float]]


def timed(times: Times, key: str, fn: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    out = fn()
    times.setdefault(key, []).append((time.perf_counter() - start) * 1000)
    return out


def tool(engine: str, image: str, tmp: Path, warm: bool) -> ExecTool:
    tree = tmp / "tree"
    tree.mkdir(exist_ok=True)
    for n in range(20):
        (tree / f"f{n}.txt").write_text(f"file {n}\n" * 20)
    config = parse_config(
        {
            "sandbox": {
                "arm": "container",
                "scratch_dir": str(tmp),
                "container": {"engine": engine, "images": {engine: image}, "warm": warm},
            },
            "state": {"dir": str(tmp / ("state-warm" if warm else "state-fresh"))},
        }
    )
    return ExecTool(config, tree, record=False)


def ok(result: Any) -> None:
    assert result.exit_code == 0, result


CONNECT = (
    "import os; from sprawl_orch.client.exec_client import connect; "
    "from sprawl_orch.core.exec_place import socket_path; "
    "connect(socket_path(dict(os.environ))).close()"
)
PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))


def cli_rows(engine: str, image: str, tmp: Path, plain: str) -> dict[str, Callable[[], Any]]:
    """The served rows of --cli: each a whole process, as a caller pays it."""
    conf = tmp / "warm.toml"
    conf.write_text(
        f'[sandbox]\narm = "container"\nscratch_dir = "{tmp}"\n'
        f'[sandbox.container]\nengine = "{engine}"\nwarm = true\n'
        f'images = {{ {engine} = "{image}" }}\n[state]\ndir = "{tmp / "state-cli"}"\n'
    )
    run_dir = tmp / "run"
    run_dir.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(run_dir)}
    served = [PROGRAM, "exec", "-C", str(tmp / "tree"), "--config", str(conf), "--", "true"]

    def call(argv: list[str], with_env: dict[str, str] | None = None) -> None:
        done = subprocess.run(argv, capture_output=True, env=with_env, check=False)
        assert done.returncode == 0, (argv[:4], done.returncode, done.stderr[-1500:])

    call(served, env)  # starts the server, admits the engine: not counted
    return {
        "exec (CLI)": lambda: call([engine, "exec", plain, "true"]),
        "served warm (CLI)": lambda: call(served, env),
        "client start (connect)": lambda: call([sys.executable, "-c", CONNECT], env),
        "python -c pass": lambda: call([sys.executable, "-c", "pass"]),
    }


def stop_server(tmp: Path) -> None:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp / "run")}
    subprocess.run([PROGRAM, "server", "stop"], capture_output=True, env=env, check=False)


def bench(engine: str, reps: int, cli: bool = False) -> Times:
    times: Times = {}
    image = build_busybox(engine)
    plain = f"sprawl-bench-plain-{engine}"
    tmp = Path(tempfile.mkdtemp(prefix="sprawl-warm-bench-"))
    warm, fresh = tool(engine, image, tmp, True), tool(engine, image, tmp, False)
    try:
        ok(warm.exec(["true"]))
        ok(fresh.exec(["true"]))
        # the same runtime and rlimits the arm was admitted with (podman 4.3's defaults
        # exceed these hosts' hard limits; crun fails where runc works, design §3.1)
        arm: Any = warm.arm()
        flags = ["--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
        if engine == "podman":
            flags += ["--runtime", str(arm.admission().runtime_used)]
        subprocess.run(
            [engine, "run", "-d", "--rm", "--name", plain, *flags, image, "sleep", "3600"],
            capture_output=True,
            check=True,
        )
        if engine == "docker":
            import docker

            handle = docker.from_env().containers.get(plain)

            def raw_exec() -> None:
                assert handle.exec_run(["true"]).exit_code == 0
        else:

            def raw_exec() -> None:
                subprocess.run(["podman", "exec", plain, "true"], check=True)

        raw_exec()
        extra = cli_rows(engine, image, tmp, plain) if cli else {}
        for _ in range(reps):
            for key, fn in extra.items():
                timed(times, key, fn)
            timed(times, "warm (sprawl-orch)", lambda: ok(warm.exec(["true"])))
            timed(times, "exec into a running container", raw_exec)
            timed(times, "fresh (sprawl-orch)", lambda: ok(fresh.exec(["true"])))
            timed(
                times,
                "run --rm",
                lambda: subprocess.run([engine, "run", "--rm", *flags, image, "true"], check=True),
            )
    finally:
        if cli:
            stop_server(tmp)
        warm.close()
        fresh.close()
        subprocess.run([engine, "rm", "-f", plain], capture_output=True)
        subprocess.run([engine, "rmi", image], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--engines", default="docker,podman")
    parser.add_argument("--cli", action="store_true", help="issue 26's served rows too")
    args = parser.parse_args()
    for engine in args.engines.split(","):
        times = bench(engine, args.reps, args.cli)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"\n{engine}: medians of {args.reps} interleaved runs of `true` (ms)")
        for key, value in med.items():
            print(f"  {key:32} {value:8.1f}")
        exec_ms = med["exec into a running container"]
        warm = med["warm (sprawl-orch)"]
        print(f"  ratio warm / exec:      {warm / exec_ms:.2f} (target <= 1.5)")
        print(f"  ratio warm / fresh:     {warm / med['fresh (sprawl-orch)']:.2f}")
        print(f"  ratio warm / run --rm:  {warm / med['run --rm']:.2f}")
        if args.cli:
            floor = med["client start (connect)"] + warm
            rm, cli_exec = med["run --rm"], med["exec (CLI)"]
            print(f"  served floor (client start + warm): {floor:8.1f}")
            start = med["client start (connect)"] / med["python -c pass"]
            print(f"  client start / python -c pass: {start:.2f}")
            for name, value in (
                ("served warm (CLI)", med["served warm (CLI)"]),
                ("served floor", floor),
            ):
                print(
                    f"  {name:22} / run --rm {value / rm:.2f} (target <= 0.5),"
                    f" / exec (CLI) {value / cli_exec:.2f} (target <= 1.2)"
                )


if __name__ == "__main__":
    main()
