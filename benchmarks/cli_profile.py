"""Where the ms of one served `sprawl-orch exec -- true` go, and the floor it is measured
against (issue 26: the targets not met are reported with these numbers).

    . .ci/env && python benchmarks/cli_profile.py [--reps N]

Each call is what an exec server's fork runs (cli/exec_server.py: everything preloaded, a
fresh process per call), timed from inside, with every engine API round trip (the docker
SDK's requests) and every program run (the docker/podman CLI, bwrap probes) timed apart;
"python" is the rest: our own work. Medians over N calls per arm, after one call that admits.

The floor of each container row is the raw mechanism's minimal equivalent with every
guarantee kept, timed side by side with `run --rm` in the same loop:
- docker: one connection held (as a server would), `docker create` by the CLI with our
  argv, the verifying inspect, attach + start, wait, the inspect that reads OOMKilled, rm.
- podman: the CLI's create, inspect, `start --attach`, inspect, rm (no API socket here);
  and its floor over podman's API service, three rows (benchmarks/podman_service_floor.py
  says what each keeps and loses; run alone, it prints them alone).
The thin client's own start (`python -c pass` x ~1.5, cli_oneshot's "client start") comes on
top of both.

`--native-only` ends with a side-by-side table per native arm (issue 26), every column timed in
the same loop: the whole served call (`sprawl-orch exec -- true` through this run's own
server), `python -c pass`, the client's own start (connect), the call as the fork runs it, and
the program it ran (ionice, nice, bwrap and its view, the command) run bare with the same argv,
uid and environment. floor = client start + the program bare: what a served call costs with
none of our Python in the fork; whole - floor is the accept, the fork, our Python and the exit.

The python arm's row (`--python-only` for it alone) runs `python -c pass` with the server's
shared runtime (native_fallbacks/wasi_shared.py, started after each call as the server does),
the runtime's fork round trip and the guest's run timed apart, against the host's
`python -c pass`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cli_oneshot import RACY_SECONDS, config_file, raw_run
from benchmarks.floors.programs import Program, bare, docker_floor, lstat_walk, med, wall, wall_env
from benchmarks.podman_service_floor import podman_floor, podman_service_rows
from sprawl_orch.core import served_memo
from sprawl_orch.images.build import build_busybox
from sprawl_orch.native_fallbacks import wasi_shared

Steps = dict[str, float]
# The programs a profiled call ran (argv, the uid it ran them as, their environment): the
# floor rows run the same ones bare (native_floor).
PROGRAMS: list[Program] = []


def traced(call: Callable[[], None]) -> Steps:
    """Run `call` with each engine round trip and program run timed by name."""
    import requests

    steps: Steps = {}
    send = requests.Session.send

    def add(key: str, took: float) -> None:
        steps[key] = steps.get(key, 0.0) + took

    def timed_send(self: Any, request: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return send(self, request, **kw)
        finally:
            path = request.path_url.split("?")[0].split("/")[1:]
            # /v1.43/containers/<id>/start -> api POST containers/start
            words = [w for w in path if len(w) < 40 and not w.startswith("v1.")]
            add(f"api {request.method} {'/'.join(words)}", time.perf_counter() - started)

    popen_init, popen_wait, popen_poll = (
        subprocess.Popen.__init__,
        subprocess.Popen.wait,
        subprocess.Popen.poll,
    )

    def timed_init(self: Any, argv: Any, *a: Any, **kw: Any) -> None:
        self._bench_started = time.perf_counter()
        words = [Path(str(argv[0])).name, *(str(w) for w in argv[1:2])]
        self._bench_name = f"run {' '.join(words)}"
        env = kw.get("env")
        PROGRAMS.append(([str(w) for w in argv], kw.get("user"), dict(env) if env else None))
        popen_init(self, argv, *a, **kw)

    def ended(self: Any) -> None:
        # a program's whole life, from its start to the first look that saw it gone
        if self.returncode is not None and getattr(self, "_bench_started", None) is not None:
            add(self._bench_name, time.perf_counter() - self._bench_started)
            self._bench_started = None

    def timed_wait(self: Any, *a: Any, **kw: Any) -> Any:
        try:
            return popen_wait(self, *a, **kw)
        finally:
            ended(self)

    def timed_poll(self: Any) -> Any:
        try:
            return popen_poll(self)
        finally:
            ended(self)

    from sprawl_orch.tool.copies import ToolCopies

    lease, hook = ToolCopies.lease, ToolCopies.changes_hook

    def timed_lease(self: Any, *a: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return lease(self, *a, **kw)
        finally:
            add("py copy resync (ToolCopies.lease)", time.perf_counter() - started)

    def timed_hook(self: Any, *a: Any, **kw: Any) -> Any:
        collect = hook(self, *a, **kw)

        def timed_collect(*b: Any, **kb: Any) -> Any:
            started = time.perf_counter()
            try:
                return collect(*b, **kb)
            finally:
                add("py changes walk (after the command)", time.perf_counter() - started)

        return timed_collect

    from sprawl_orch.container import ownership

    own = ownership.own_copy

    def timed_own(*a: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return own(*a, **kw)
        finally:
            add("py copy given to the container user (walk)", time.perf_counter() - started)

    from sprawl_orch.native_fallbacks import wasi_forked, wasi_python

    fork, guest_wait = wasi_forked.Runtime.fork, wasi_python.GuestRun.wait

    def timed_fork(self: Any, *a: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return fork(self, *a, **kw)
        finally:
            add("python arm: runtime fork round trip", time.perf_counter() - started)

    def timed_guest(self: Any, *a: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return guest_wait(self, *a, **kw)
        finally:
            add("python arm: the guest's run (wait)", time.perf_counter() - started)

    # patched through Any: these are timing wrappers around the real functions
    runtime: Any = wasi_forked.Runtime
    guest: Any = wasi_python.GuestRun
    runtime.fork, guest.wait = timed_fork, timed_guest
    owner: Any = ownership
    copies: Any = ToolCopies
    session: Any = requests.Session
    popen: Any = subprocess.Popen
    owner.own_copy = timed_own
    copies.lease, copies.changes_hook = timed_lease, timed_hook
    session.send = timed_send
    popen.__init__, popen.wait, popen.poll = timed_init, timed_wait, timed_poll
    started = time.perf_counter()
    try:
        call()
    finally:
        copies.lease, copies.changes_hook = lease, hook
        runtime.fork, guest.wait = fork, guest_wait
        owner.own_copy = own
        session.send = send
        popen.__init__, popen.wait, popen.poll = popen_init, popen_wait, popen_poll
    total = time.perf_counter() - started
    phases = sum(v for k, v in steps.items() if k.startswith("py "))
    steps["python (the rest)"] = total - sum(steps.values())
    steps["python (the rest)"] += phases  # the phases are python too: shown inside it
    steps["TOTAL"] = total
    return steps


def forked(conf: Path, tree: Path, argv: tuple[str, ...] = ("true",)) -> Steps:
    """One call in a fork of this (preloaded) process, its steps back through a pipe."""
    import json

    read, write = os.pipe()
    learned, teach = os.pipe2(os.O_NONBLOCK)
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.close(learned)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        from sprawl_orch.cli import main

        def call() -> None:
            try:
                main(
                    args=["exec", "-C", str(tree), "--config", str(conf), "--", *argv],
                    prog_name="sprawl-orch",
                )
            except SystemExit as done:
                if done.code not in (0, None):
                    raise RuntimeError(f"exec ended {done.code}") from None

        PROGRAMS.clear()
        steps = traced(call)
        served_memo.send_learned(teach)  # what the server keeps for the next call
        os.write(write, json.dumps({"steps": steps, "programs": PROGRAMS}).encode())
        os._exit(0)
    os.close(write)
    os.close(teach)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    served_memo.take_learned(learned)
    os.close(learned)
    wasi_shared.after_call()  # as the server: the python arm's runtime held for the next
    if status != 0 or not data:
        raise SystemExit(f"the profiled call failed ({status}); run it by hand with {conf}")
    answer = json.loads(data)
    PROGRAMS[:] = [(list(a), u, e) for a, u, e in answer["programs"]]
    steps: Steps = answer["steps"]
    return steps


def show(arm: str, runs: list[Steps]) -> None:
    keys = sorted(
        {k for r in runs for k in r},
        key=lambda k: -statistics.median([r.get(k, 0.0) for r in runs]),
    )
    print(f"\n{arm}: one served call, medians of {len(runs)} (ms)")
    for key in keys:
        values = [r.get(key, 0.0) * 1000 for r in runs]
        print(f"  {key:44} {statistics.median(values):7.1f}")


def python_row(reps: int) -> int:
    """The python arm's served call (its first call compiles the module: not counted)."""
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-profile-py-") as tmp:
        work = Path(tmp)
        (work / "small").mkdir()
        (work / "small" / "a.txt").write_text("a\n")
        conf = work / "python.toml"
        conf.write_text(f'[sandbox]\narm = "python"\n[state]\ndir = "{work / "state"}"\n')
        argv = ("python", "-c", "pass")
        try:
            for _ in range(2):  # compiles, then the server's runtime starts after it
                forked(conf, work / "small", argv)
            show(
                "python arm (shared runtime)",
                [forked(conf, work / "small", argv) for _ in range(reps)],
            )
        finally:
            wasi_shared.close_all()
    host = statistics.median(wall([sys.executable, "-c", "pass"]) for _ in range(reps))
    print(f"  host python -c pass (wall, for the ratio): {host * 1000:.1f} ms")
    return 0


def native_rows(reps: int) -> int:
    """The two native rows, each call measured whole beside its parts and its floor, in one
    loop (no engine needed: the images named in the config are never asked for):
    - the whole served call: the `sprawl-orch` program (thin client + this run's own server);
    - `python -c pass`, the host's floor for any Python client;
    - the client's own start: python, its imports, the socket's name and checks, connect;
    - the call as the server's fork runs it (in-fork TOTAL, its program run apart);
    - the program the call ran (ionice, nice, bwrap and its view, the command), run bare.
    The floor is client start + the program bare: what a served call costs with none of our
    Python in the fork (accept, fork, config, guards, copy sync, guardian, statement)."""
    from benchmarks.cli_oneshot import PROGRAM

    images = {"docker": "sha256:" + "0" * 64, "podman": "sha256:" + "0" * 64}
    python = [sys.executable, "-c", "pass"]
    connect = [
        sys.executable,
        "-c",
        "import os; from sprawl_orch.client.exec_client import connect; "
        "from sprawl_orch.core.exec_place import socket_path; "
        # ended as the client ends a served call (exec_client._leave: no teardown)
        "connect(socket_path(dict(os.environ))).close(); os._exit(0)",
    ]
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-profile-") as tmp:
        work = Path(tmp)
        small = work / "small"
        small.mkdir()
        (small / "a.txt").write_text("a\n")
        (small / "b.txt").write_text("b\n")
        runtime_dir = work / "run"
        runtime_dir.mkdir(mode=0o700)
        # this run's own exec server, gone 20 s after the last call
        served = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(runtime_dir),
            "SPRAWL_EXEC_SERVER_IDLE": "20",
        }
        time.sleep(RACY_SECONDS)
        table: list[tuple[str, float, float, float, float, float]] = []
        for arm, asked in (("linux_namespaces", "native"), ("copied_tree", "copied_tree")):
            conf = config_file(work / f"{arm}.toml", asked, "auto", images, work / "state")
            whole_argv = [PROGRAM, "exec", "-C", str(small), "--config", str(conf), "--", "true"]
            forked(conf, small)  # makes the copy, teaches this process: not counted
            wall_env(whole_argv, served)  # starts the server, teaches it: not counted
            runs: list[Steps] = []
            whole, pypass, client, mechanism = [], [], [], []
            for _ in range(reps):
                whole.append(wall_env(whole_argv, served))
                pypass.append(wall(python))
                client.append(wall_env(connect, served))
                runs.append(forked(conf, small))
                program = [p for p in PROGRAMS if "sprawl_orch.guardian" not in p[0]][-1]
                mechanism.append(bare(program))
            show(arm, runs)
            print(f"  {'python -c pass (same loop)':44} {med(pypass):7.1f}")
            table.append(
                (
                    arm,
                    med(whole),
                    med(pypass),
                    med(client),
                    statistics.median(r["TOTAL"] for r in runs) * 1000,
                    med(mechanism),
                )
            )
    print(
        f"\n{'served call, side by side (ms)':20} {'whole':>7} {'python':>7} {'client':>7}"
        f" {'in-fork':>8} {'bare':>7} {'floor':>7} {'ours/py':>8} {'floor/py':>9}"
    )
    for arm, whole_ms, py_ms, client_ms, fork_ms, bare_ms in table:
        floor = client_ms + bare_ms
        print(
            f"{arm:30} {whole_ms:7.1f} {py_ms:7.1f} {client_ms:7.1f} {fork_ms:8.1f} {bare_ms:7.1f}"
            f" {floor:7.1f} {whole_ms / py_ms:7.2f}x {floor / py_ms:8.2f}x"
        )
    print(
        "  whole: `sprawl-orch exec -- true` through the thin client; client: its start alone"
        " (connect);\n  in-fork: the call as the server's fork runs it; bare: the program it"
        " ran (ionice, nice, bwrap, true),\n  same argv, uid and environment; floor = client"
        " + bare; whole - floor = accept, fork, our Python, exit."
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--files", type=int, default=10_000, help="the big tree's files")
    parser.add_argument("--big-only", action="store_true", help="the big-tree row alone")
    parser.add_argument("--python-only", action="store_true", help="the python arm's row alone")
    parser.add_argument(
        "--native-only", action="store_true", help="the linux_namespaces and copied_tree rows"
    )
    args = parser.parse_args()
    from sprawl_orch.cli.exec_server import preload

    preload()
    if args.python_only:
        return python_row(args.reps)
    if args.native_only:
        return native_rows(args.reps)
    images = {e: build_busybox(e) for e in ("docker", "podman")}
    floors: list[tuple[str, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-profile-") as tmp:
        work = Path(tmp)
        small = work / "small"
        small.mkdir()
        (small / "a.txt").write_text("a\n")
        (small / "b.txt").write_text("b\n")
        time.sleep(RACY_SECONDS)
        state = work / "state"
        arms = (
            ("docker", "container", "docker"),
            ("podman", "container", "podman"),
            ("linux_namespaces", "native", "auto"),
            ("copied_tree", "copied_tree", "auto"),
        )
        for arm, asked, engine in () if args.big_only else arms:
            conf = config_file(work / f"{arm}.toml", asked, engine, images, state)
            forked(conf, small)  # admits, makes the copy: not counted
            show(arm, [forked(conf, small) for _ in range(args.reps)])
        big = work / "big"
        block = os.urandom(16 * 1024)
        for i in range(args.files):
            (big / f"d{i // 1000}").mkdir(parents=True, exist_ok=True)
            (big / f"d{i // 1000}" / f"f{i}").write_bytes(block)
        time.sleep(RACY_SECONDS)
        conf = config_file(work / "big.toml", "container", "docker", images, state)
        forked(conf, big)
        show(f"docker, {args.files}-file tree, no change", [forked(conf, big) for _ in range(3)])
        copies = [p.parent for p in state.rglob("d0") if p.is_dir()]  # the kept copy
        one = statistics.median(lstat_walk([big]) for _ in range(3))
        both = statistics.median(lstat_walk([big, *copies[:1]]) for _ in range(3))
        print(
            f"  floor of the resync: lstat walk of the person's tree {one * 1000:.1f} ms, "
            f"of both trees {both * 1000:.1f} ms (issue 26 item 4: <= 0.6x both)"
        )
        python = [sys.executable, "-c", "pass"]
        engines = () if args.big_only else (("docker", docker_floor), ("podman", podman_floor))
        for engine, floor in engines:
            raw = raw_run(engine, images[engine], small, "runc" if engine == "podman" else None)
            ours, theirs = [], []
            for _ in range(args.reps):
                ours.append(floor(images[engine], small))
                theirs.append(wall(raw))
            pypass = statistics.median(wall(python) for _ in range(args.reps))
            floors.append((engine, statistics.median(ours), statistics.median(theirs), pypass))
            if engine == "podman":  # the API service's rows, side by side again
                podman_service_rows(images[engine], small, raw, args.reps)
    print(f"\n{'floor (every guarantee, one held connection)':48} {'floor':>8} {'run --rm':>8}")
    for engine, ours_s, raw_s, py_s in floors:
        # + the thin client's own start: ~1.5x `python -c pass` (cli_oneshot's client row)
        with_client = ours_s + 1.5 * py_s
        print(
            f"{engine:48} {ours_s * 1000:6.0f}ms {raw_s * 1000:6.0f}ms  ratio {ours_s / raw_s:.2f}x"
            f"; with a client start ratio {with_client / raw_s:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
