"""How fast the guardian cleans up after a SIGKILLed orchestrator, against the raw mechanism.

    python benchmarks/guardian.py [--runs N] [--containers K] [--engines docker,podman]

Per engine and run: a parent process starts the guardian (orchestrator.guardian_client),
creates K running busybox `sleep 300` containers labelled with its session and announces
them, then is SIGKILLed; we time from the kill to the last of its containers gone from the
engine's list. Measured side by side in this one run:

- guardian, docker through its CLI (the default) and through the SDK (`--docker-via sdk`);
- guardian, podman (CLI: no API socket here);
- raw: the same K containers removed directly by a live process (`docker rm -f` / SDK
  remove in parallel / `podman rm -f -t 0`): the floor any reaper pays;
- testcontainers' Ryuk, by its documentation only: it removes labelled resources after its
  reconnection timeout, RYUK_RECONNECTION_TIMEOUT = 10 s by default, once its last client
  disconnected. It cannot run here: it is a container image (testcontainers/ryuk) that must
  be pulled, and no registry is reachable.

Also prints the client's start cost (Guardian.start() in the caller, and until the guardian
has opened its engines). "Gone" is detected without getting in the way: docker by the SDK's
list (~3 ms a call); podman by its containers' storage directories
(GraphRoot/overlay-containers/<id>, deleted by `podman rm` just before the database entry) --
polling `podman ps` instead would spend the CPU and take the locks the removal needs. Every
timing is then confirmed by one engine list.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sprawl_orch.images.build import build_busybox  # noqa: E402
from sprawl_orch.runs.guardian_client import Guardian  # noqa: E402

RYUK_RECONNECTION_TIMEOUT = 10.0
PODMAN_RUN = ["--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]

# The parent: announce, create, say ready, wait to be killed.
PARENT = r"""
import json, subprocess, sys, time
sys.path.insert(0, sys.argv[2])
from sprawl_orch.runs.guardian_client import Guardian
spec = json.loads(sys.argv[1])
g = Guardian(spec["session"], [spec["engine"]], log=spec["log"], argv=spec["argv"])
for n in range(spec["containers"]):
    name = f"sprawl-{spec['session']}-{n}"
    g.expect(name)
    done = subprocess.run([spec["engine"], "run", "-d", *spec["extra"], "--name", name,
                           "--label", "sprawl.session=" + spec["session"], "--network", "none",
                           spec["image"], "sleep", "300"], capture_output=True, text=True,
                          check=True)
    g.created(name, done.stdout.split()[-1])
print("ready", flush=True)
time.sleep(600)
"""


def lister(engine: str) -> Callable[[str], list[str]]:
    if engine == "docker":
        import docker

        api = docker.from_env().api

        def docker_ids(session: str) -> list[str]:
            found = api.containers(
                all=True, quiet=True, filters={"label": f"sprawl.session={session}"}
            )
            return [c["Id"] for c in found]

        return docker_ids

    def podman_ids(session: str) -> list[str]:
        done = subprocess.run(
            ["podman", "ps", "-a", "-q", "--filter", f"label=sprawl.session={session}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split()

    return podman_ids


def gone_probe(engine: str) -> Callable[[str, list[str]], bool]:
    """(session, ids) -> True once every container is gone (cheap enough to spin on)."""
    if engine == "docker":
        return lambda session, ids: not LISTERS["docker"](session)
    root = subprocess.run(
        ["podman", "info", "--format", "{{.Store.GraphRoot}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    store = Path(root) / "overlay-containers"
    return lambda session, ids: not any((store / i).exists() for i in ids)


def wait_gone(engine: str, session: str, ids: list[str]) -> float:
    """Spin until gone; return the perf_counter time it was seen gone."""
    while not PROBES[engine](session, ids):
        pass
    seen = time.perf_counter()
    left = LISTERS[engine](session)
    if left:
        raise RuntimeError(f"{engine}: the probe said gone but the engine lists {left}")
    return seen


def wait_log(log: Path, event: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and f'"event": "{event}"' in log.read_text():
            return
        time.sleep(0.01)
    raise RuntimeError(f"the guardian never logged {event!r}: {log.read_text()}")


def one_kill(engine: str, image: str, k: int, via: str, tmp: Path) -> dict[str, float]:
    session = f"bench{secrets.token_hex(4)}"
    log = tmp / f"{session}.log"
    argv = [
        sys.executable,
        "-m",
        "sprawl_orch.guardian",
        "--session",
        session,
        "--engines",
        engine,
        "--docker-via",
        via,
    ]
    spec = {
        "session": session,
        "engine": engine,
        "containers": k,
        "image": image,
        "extra": PODMAN_RUN if engine == "podman" else [],
        "log": str(log),
        "argv": argv,
    }
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, json.dumps(spec), str(ROOT)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert parent.stdout is not None
    if parent.stdout.readline().strip() != "ready":
        raise RuntimeError("the parent did not get ready")
    wait_log(log, "engine")  # the guardian is up and holds its engine client, as in life
    ids = full_ids(engine, session)
    assert len(ids) == k, ids
    killed = time.perf_counter()
    os.kill(parent.pid, signal.SIGKILL)
    gone = wait_gone(engine, session, ids) - killed
    parent.wait()
    wait_log(log, "done")
    done = next(
        json.loads(line) for line in log.read_text().splitlines() if '"event": "done"' in line
    )
    return {"gone": gone, "guardian_seconds": done["seconds"]}


def one_raw(engine: str, image: str, k: int, how: str) -> float:
    session = f"bench{secrets.token_hex(4)}"
    names = [f"sprawl-{session}-{n}" for n in range(k)]
    extra = PODMAN_RUN if engine == "podman" else []
    for name in names:
        subprocess.run(
            [
                engine,
                "run",
                "-d",
                *extra,
                "--name",
                name,
                "--label",
                f"sprawl.session={session}",
                "--network",
                "none",
                image,
                "sleep",
                "300",
            ],
            capture_output=True,
            check=True,
        )
    ids = full_ids(engine, session)
    started = time.perf_counter()
    if how == "sdk":
        import docker

        api = docker.from_env().api
        with ThreadPoolExecutor(k) as pool:
            list(pool.map(lambda n: api.remove_container(n, force=True), names))
    else:
        rm = ["docker", "rm", "-f"] if engine == "docker" else ["podman", "rm", "-f", "-t", "0"]
        subprocess.run([*rm, *names], capture_output=True, check=True)
    return wait_gone(engine, session, ids) - started


def client_start_cost(runs: int) -> tuple[list[float], list[float]]:
    calls, ready = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(runs):
            log = Path(tmp) / f"{n}.log"
            guardian = Guardian(f"start{n}", ["docker"], log=log)
            started = time.perf_counter()
            guardian.start()
            calls.append(time.perf_counter() - started)
            wait_log(log, "engine")
            ready.append(time.perf_counter() - started)
            guardian.close(wait=30)
    return calls, ready


def full_ids(engine: str, session: str) -> list[str]:
    done = subprocess.run(
        [engine, "ps", "-a", "-q", "--no-trunc", "--filter", f"label=sprawl.session={session}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [i.removeprefix("sha256:") for i in done.stdout.split()]


LISTERS: dict[str, Callable[[str], list[str]]] = {}
PROBES: dict[str, Callable[[str, list[str]], bool]] = {}


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:7.0f} ms   max {max(values) * 1000:7.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--containers", type=int, default=3)
    parser.add_argument("--engines", default="docker,podman")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    images = {e: build_busybox(e) for e in engines}
    for engine in engines:
        LISTERS[engine] = lister(engine)
        PROBES[engine] = gone_probe(engine)
    k = args.containers
    rows: list[tuple[str, list[float], str]] = []
    notes: dict[str, Any] = {}
    # Variants interleaved run by run, so a busy moment of the machine hits all of them alike.
    kills = [(e, via) for e in engines for via in (["cli", "sdk"] if e == "docker" else ["cli"])]
    raws = [(e, how) for e in engines for how in (["cli", "sdk"] if e == "docker" else ["cli"])]
    gone: dict[tuple[str, str], list[float]] = {v: [] for v in kills}
    done: dict[tuple[str, str], list[float]] = {v: [] for v in kills}
    floor: dict[tuple[str, str], list[float]] = {v: [] for v in raws}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for engine, via in kills:
                result = one_kill(engine, images[engine], k, via, Path(tmp))
                gone[engine, via].append(result["gone"])
                done[engine, via].append(result["guardian_seconds"])
            for engine, how in raws:
                floor[engine, how].append(one_raw(engine, images[engine], k, how))
    for (engine, via), values in gone.items():
        label = f"guardian {engine} ({'SDK' if via == 'sdk' else 'CLI'})"
        rows.append((label, values, "SIGKILL -> last gone"))
        notes[label] = statistics.median(done[engine, via])
    for (engine, how), values in floor.items():
        verb = "SDK remove x K in threads" if how == "sdk" else "rm -f (one CLI call)"
        rows.append((f"raw {engine} {verb}", values, "remove -> last gone"))
    calls, ready = client_start_cost(args.runs)

    print(f"\nguardian benchmark: {args.runs} runs per row, {k} running containers per kill\n")
    for label, values, what in rows:
        print(f"  {label:38s} {ms(values)}   ({what})")
    print(
        f"  {'testcontainers Ryuk (documented)':38s} >= {RYUK_RECONNECTION_TIMEOUT * 1000:.0f}"
        " ms after disconnect (RYUK_RECONNECTION_TIMEOUT default 10 s); not run here: its"
        " image must be pulled and no registry is reachable"
    )
    print()
    for engine in engines:
        # the default guardian row first; the fastest raw removal as the floor
        guardian = next(v for label, v, _ in rows if label.startswith(f"guardian {engine}"))
        g = statistics.median(guardian)
        r = min(statistics.median(v) for label, v, _ in rows if label.startswith(f"raw {engine}"))
        print(
            f"  {engine}: guardian / fastest raw removal = {g / r:.2f}x; "
            f"Ryuk's 10 s / guardian = {RYUK_RECONNECTION_TIMEOUT / g:.0f}x"
        )
    for label, seconds in notes.items():
        print(
            f"  {label}: EOF -> guardian done (its own clock, incl. final check) "
            f"median {seconds * 1000:.0f} ms"
        )
    print(f"  Guardian.start() in the caller: {ms(calls)}")
    print(f"  ... until the guardian has opened its engines (off the caller's path): {ms(ready)}")
    goal = all(statistics.median(v) < 1.0 for label, v, _ in rows if label.startswith("guardian"))
    print(
        f"\n  goal (< 1 s median from SIGKILL to last container gone): "
        f"{'met' if goal else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
