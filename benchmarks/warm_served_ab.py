"""A served warm call, two builds side by side in one run (issue 26's warm row), with its
raw mechanisms and its floor.

    . .ci/env && python benchmarks/warm_served_ab.py [--reps N] [--base PROGRAM]

PROGRAM is another installed `sprawl-orch` (say, a venv with the merge base `pip install`ed):
its served warm call is timed in the same loop as this checkout's, each with a server of its
own (its own runtime directory), so machine noise hits both alike. Per rep, in an order that
rotates each rep (docker, the same busybox image, `true`):

- run --rm:        `docker run --rm` with our create argv's limits (cli_oneshot.raw_run);
- docker exec:     the CLI, into a plain running container;
- exec_run:        the docker SDK's `exec_run` on a kept client (create, start, inspect);
- library warm:    `ExecTool.exec(["true"])` with `warm = true`, in this process;
- client start:    the served program's interpreter, the client's imports, a connect;
- served (this) / served (base): `PROGRAM exec -C tree --config warm.toml -- true` through
                   the exec server: a kept container after the first call.

floor = client start + library warm: the least a served warm call can cost (the client, then
what the library does with a kept container). CPU per served call: the client's (this
process's reaped children) and the server's (its own and its reaped calls',
/proc/<pid>/stat), over the whole loop, divided by the calls. Run with installed programs
(`pip install .`): an editable install's finder costs every Python start ~40 ms (docs/warm.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cli_oneshot import RACY_SECONDS, raw_run
from sprawl_orch.config import parse_config
from sprawl_orch.images.build import build_busybox
from sprawl_orch.tool.exec_tool import ExecTool

HERE = str(Path(sys.executable).with_name("sprawl-orch"))
CONNECT = (
    "import os; from sprawl_orch.client.exec_client import connect; "
    "from sprawl_orch.core.exec_place import socket_path; "
    "connect(socket_path(dict(os.environ))).close()"
)
TICK = os.sysconf("SC_CLK_TCK")


class Served:
    """One program's served warm call, with a server of its own."""

    def __init__(self, program: str, tmp: Path, tree: Path, image: str, label: str) -> None:
        self.program, self.label = program, label
        self.run_dir = tmp / f"run-{label}"
        self.run_dir.mkdir(mode=0o700)
        self.env = {**os.environ, "XDG_RUNTIME_DIR": str(self.run_dir)}
        conf = tmp / f"warm-{label}.toml"
        conf.write_text(
            f'[sandbox]\narm = "container"\nscratch_dir = "{tmp}"\n'
            f'[sandbox.container]\nengine = "docker"\nwarm = true\n'
            f'images = {{ docker = "{image}" }}\n[state]\ndir = "{tmp / ("state-" + label)}"\n'
        )
        self.argv = [program, "exec", "-C", str(tree), "--config", str(conf), "--", "true"]
        self.calls = 0

    def __call__(self) -> None:
        done = subprocess.run(self.argv, capture_output=True, env=self.env, check=False)
        assert done.returncode == 0, (self.label, done.returncode, done.stderr[-1500:])
        self.calls += 1

    def server_pid(self) -> int:
        (lock,) = (self.run_dir / "sprawl-orch").glob("exec-*.sock.lock")
        return int(lock.read_text().split()[0])

    def stop(self) -> None:
        subprocess.run(
            [self.program, "server", "stop"], capture_output=True, env=self.env, check=False
        )


def cpu_of(pid: int) -> float:
    """utime + stime + cutime + cstime of `pid`, in ms (its reaped children included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(x) for x in fields[11:15]) * 1000 / TICK


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--base", help="another installed sprawl-orch program, timed alongside")
    parser.add_argument("--program", default=HERE, help="this build's program (default: ours)")
    args = parser.parse_args()
    # Not removed at the end: the tag is the one every benchmark and test on this machine
    # builds, and another run may be using it now.
    image = build_busybox("docker")
    tmp = Path(tempfile.mkdtemp(prefix="sprawl-warm-ab-"))
    plain = f"sprawl-bench-warm-ab-{os.getpid()}"
    tree = tmp / "tree"
    tree.mkdir()
    for n in range(20):
        (tree / f"f{n}.txt").write_text(f"file {n}\n" * 20)
    time.sleep(RACY_SECONDS)  # older than a sync's racy window (cli_oneshot says why)
    served = [Served(args.program, tmp, tree, image, "this")]
    if args.base:
        served.append(Served(args.base, tmp, tree, image, "base"))
    config = parse_config(
        {
            "sandbox": {
                "arm": "container",
                "scratch_dir": str(tmp),
                "container": {"engine": "docker", "images": {"docker": image}, "warm": True},
            },
            "state": {"dir": str(tmp / "state-lib")},
        }
    )
    library = ExecTool(config, tree, record=False)
    python = str(Path(args.program).with_name("python"))
    loads = [os.getloadavg()[0]]
    times: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    try:
        run_rm = raw_run("docker", image, tree, None)
        idle = ["sleep", "3600"]
        subprocess.run(
            ["docker", "run", "-d", "--rm", "--name", plain, "--network", "none", image, *idle],
            capture_output=True,
            check=True,
        )
        import docker

        handle = docker.from_env().containers.get(plain)

        def sub(argv: list[str], env: dict[str, str] | None = None) -> Callable[[], None]:
            def one() -> None:
                subprocess.run(argv, capture_output=True, env=env, check=True)

            return one

        def lib() -> None:
            assert library.exec(["true"]).exit_code == 0

        def exec_run() -> None:
            assert handle.exec_run(["true"]).exit_code == 0

        rows: dict[str, Callable[[], None]] = {
            "run --rm": sub(run_rm),
            "docker exec (CLI)": sub(["docker", "exec", plain, "true"]),
            "exec_run (SDK)": exec_run,
            "library warm": lib,
            "client start (connect)": sub([python, "-c", CONNECT], served[0].env),
            "python -c pass": sub([python, "-c", "pass"]),
            **{f"served ({s.label})": s for s in served},
        }
        for s in served:
            s()  # the first: starts its server, admits, makes the kept container
        for fn in rows.values():
            fn()  # the library's first makes its container; a served call's first reuses
        start_cpu = {s.label: (cpu_of(s.server_pid()), s.calls) for s in served}
        names = list(rows)
        for rep in range(args.reps):
            turn = names[rep % len(names) :] + names[: rep % len(names)]
            for name in turn:
                before_children, before_self = children_cpu(), time.process_time()
                started = time.perf_counter()
                rows[name]()
                times.setdefault(name, []).append((time.perf_counter() - started) * 1000)
                cpu[name] = cpu.get(name, 0.0) + children_cpu() - before_children
                if name in ("library warm", "exec_run (SDK)"):  # in this process
                    cpu[name] += (time.process_time() - before_self) * 1000
        time.sleep(0.5)  # the last calls reaped by their servers
        server_cpu = {
            s.label: (cpu_of(s.server_pid()) - start_cpu[s.label][0])
            / (s.calls - start_cpu[s.label][1])
            for s in served
        }
        loads.append(os.getloadavg()[0])
    finally:
        for s in served:
            s.stop()
        library.close()
        subprocess.run(["docker", "rm", "-f", plain], capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"\ndocker: medians of {args.reps} rotated reps of `true` (ms); 1-min load "
        f"{loads[0]:.1f} -> {loads[1]:.1f}"
    )
    for name, value in med.items():
        print(f"  {name:28} {value:8.1f} ms   cpu {cpu.get(name, 0.0) / args.reps:6.1f} ms")
    rm, cli_exec = med["run --rm"], med["docker exec (CLI)"]
    floor = med["client start (connect)"] + med["library warm"]
    print(f"  floor (client start + library warm) {floor:8.1f} ms")
    print(f"  floor / run --rm: {floor / rm:.2f}   floor / docker exec: {floor / cli_exec:.2f}")
    for s in served:
        ours = med[f"served ({s.label})"]
        client = cpu[f"served ({s.label})"] / args.reps
        print(
            f"  served ({s.label}) / run --rm: {ours / rm:.2f} (target <= 0.5)   / docker exec: "
            f"{ours / cli_exec:.2f} (target <= 1.2)   - floor: {ours - floor:+.1f} ms   cpu: "
            f"client {client:.1f} + server {server_cpu[s.label]:.1f} ms"
        )
    if args.base:
        pairs = [a / b for a, b in zip(times["served (this)"], times["served (base)"], strict=True)]
        print(f"  ratio this / base (median of paired ratios): {statistics.median(pairs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
