"""Which call is fastest for each step of a container run — the numbers behind the choices
in orchestrator/engines/docker.py and podman.py.

    . .ci/env && python benchmarks/container_steps.py [--reps N]

docker: create (CLI vs SDK), inspect (SDK vs CLI), start+wait+output (SDK start, wait,
logs; SDK attach, start, wait — what the arm does; CLI `start -a`), remove (SDK vs CLI).
podman (CLI only, no service socket): `start --attach` vs `start` + `wait` + `logs`, and
the per-call floor (`inspect`).
Interleaved, medians in ms.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits, create_argv
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.podman import PodmanEngine
from sprawl_orch.images.build import build_busybox

Times = dict[str, list[float]]


# Names of this run only: a fixed "sprawl-steps-0" collided with one a killed run left.
RUN = secrets.token_hex(3)


def timed(times: Times, key: str, fn: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    out = fn()
    times.setdefault(key, []).append((time.perf_counter() - start) * 1000)
    return out


def cli(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout.strip()


def docker_steps(reps: int, copy: Path, times: Times) -> None:
    engine = DockerEngine()
    api = engine.api()
    image = build_busybox("docker")
    host = HostLimits.this_host()
    try:
        for n in range(reps):
            argv = create_argv(
                "docker",
                ContainerConfig(),
                image,
                copy,
                ["true"],
                [],
                f"steps-{RUN}-{n}",
                "steps",
                "steps",
                None,
                host=host,
            )
            # every container measured below is created the same way (our argv, CLI) ...
            cid = timed(times, "docker create: CLI (our argv)", lambda a=argv: engine.create(a))
            # ... the SDK create is timed on a throwaway with the same image (fewer options)
            sdk = timed(
                times,
                "docker create: SDK (minimal)",
                lambda n=n: api.create_container(
                    image,
                    ["true"],
                    name=f"sprawl-steps-sdk-{RUN}-{n}",
                    host_config=api.create_host_config(network_mode="none"),
                )["Id"],
            )
            api.remove_container(sdk)
            timed(times, "docker inspect: SDK", lambda c=cid: api.inspect_container(c))
            timed(times, "docker inspect: CLI", lambda c=cid: cli("docker", "inspect", c))
            if n % 3 == 1:
                timed(
                    times,
                    # no logs step: our containers run --log-driver none (the engine's log
                    # held every byte on the host's disk), output comes by attach only
                    "docker start+wait: SDK",
                    lambda c=cid: (api.start(c), api.wait(c)),
                )
                timed(times, "docker remove: SDK", lambda c=cid: api.remove_container(c))
            elif n % 3 == 2:

                def attached(c: str = cid) -> None:  # what DockerAttached does
                    run = engine.start(c, copy / "o", copy / "e")
                    run.wait(None)
                    run.collect()

                timed(times, "docker attach+start+wait: SDK", attached)
                timed(times, "docker remove: SDK", lambda c=cid: api.remove_container(c))
            else:
                timed(times, "docker start -a: CLI", lambda c=cid: cli("docker", "start", "-a", c))
                timed(times, "docker remove: CLI", lambda c=cid: cli("docker", "rm", c))
    finally:
        subprocess.run(["docker", "rmi", image], capture_output=True, check=False)


def podman_steps(reps: int, copy: Path, times: Times) -> None:
    engine = PodmanEngine()
    image = build_busybox("podman")
    host = HostLimits.this_host()
    runtime = engine.facts().default_runtime
    try:
        for n in range(reps):
            argv = create_argv(
                "podman",
                ContainerConfig(),
                image,
                copy,
                ["true"],
                [],
                f"steps-{RUN}-{n}",
                "steps",
                "steps",
                runtime,
                host=host,
            )
            cid = timed(times, "podman create: CLI", lambda a=argv: engine.create(a))
            timed(times, "podman inspect: CLI", lambda c=cid: engine.inspect(c))
            if n % 2:
                timed(
                    times,
                    "podman start --attach: CLI",
                    lambda c=cid: cli("podman", "start", "--attach", c),
                )
            else:
                timed(
                    times,
                    "podman start+wait: CLI",  # --log-driver none: no logs to read
                    lambda c=cid: (cli("podman", "start", c), cli("podman", "wait", c)),
                )
            timed(times, "podman rm: CLI", lambda c=cid: cli("podman", "rm", c))
    finally:
        subprocess.run(["podman", "rmi", image], capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    times: Times = {}
    with tempfile.TemporaryDirectory(prefix="sprawl-steps-") as tmp:
        copy = Path(tmp)
        docker_steps(args.reps, copy, times)
        podman_steps(args.reps, copy, times)
    for key, values in times.items():
        print(f"{key:34} {statistics.median(values):8.1f} ms  (n={len(values)})")


if __name__ == "__main__":
    main()
