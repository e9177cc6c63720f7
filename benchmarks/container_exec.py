"""Per-command cost of the container arm against the raw engine, side by side in one run.

    . .ci/env && python benchmarks/container_exec.py [--reps N] [--cli-reps M]

For each variant with the same busybox image and the same limits/mount — docker (the plain
daemon), docker-userns (the --userns-remap daemon at $SPRAWL_DOCKER_USERNS_HOST), podman
(userns = "off"), podman-userns (--userns=auto, the default), and docker-runsc /
podman-runsc (runtime = "runsc": gVisor; raw is `docker run --runtime runsc` / `podman run
--runtime <the runsc wrapper>`, so each is compared with raw gVisor, not raw runc):
- ours:    ContainerArm in this one long-lived process (admitted once), per command:
           own copy -> create (CLI) -> inspect + verify -> start -> wait -> output -> inspect
           -> remove. This is what the library and `sprawl-orch serve` pay per command.
- raw:     `docker run --rm …` / `podman run --rm --runtime <admitted> …`, same flags
           (podman-userns: `--userns auto:size=65536`; docker-userns: the remapped daemon).
- cli:     `sprawl-orch exec -- true` as a fresh process (python start, imports, admission
           with its probe container, sync, the run): what a one-shot CLI call pays.
Runs are interleaved (ours, raw, ours, raw, …) so machine noise hits both. Prints medians
and ratios; the goal is ours/raw(docker) <= 1.15.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.config import ContainerConfig, EngineImages
from sprawl_orch.container.admission import admit
from sprawl_orch.container.argv import HostLimits, create_argv
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.container.docker import DockerEngine
from sprawl_orch.container.engine import Engine
from sprawl_orch.container.podman import PodmanEngine
from sprawl_orch.images.build import build_busybox
from sprawl_orch.launch import Launch

ROOT = Path(__file__).resolve().parent.parent
# the `sprawl-orch` console script, without needing the package installed
CLI = "import sys; from sprawl_orch.cli import main; sys.argv[0] = 'sprawl-orch'; main()"


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def raw_run_argv(engine: Engine, config: ContainerConfig, image: str, copy: Path,
                 runtime: str | None, userns: tuple[str, ...] = (),
                 gvisor: bool = False) -> list[str]:
    """Our create argv turned into `run --rm` (no name/labels: the raw mechanism)."""
    argv = list(create_argv(engine.name, config, image, copy, ["true"], [], "raw-1", "raw",
                            "raw", runtime, host=HostLimits.this_host(), userns=userns,
                            gvisor=gvisor))
    for flag in ("--name", "--label", "--label"):
        at = argv.index(flag)
        del argv[at:at + 2]
    argv[0:1] = ["run", "--rm"]
    return list(engine.cli_argv(argv))


def ours_once(arm: ContainerArm, copy: Path, out: Path, n: int, session: str) -> float:
    launch = Launch(argv=("true",), cwd=copy, env={}, outputs=out / str(n),
                    tag=f"{session}-{n}", session=session, run="bench")
    start = time.perf_counter()
    running = arm.start(launch)
    running.wait(None)
    done = running.finish()
    took = time.perf_counter() - start
    assert done.exit_code == 0 and done.extra["container"]["removed"], done  # type: ignore[index]
    return took


def raw_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def cli_once(workdir: Path, config_file: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CLI, "exec", "-C", str(workdir), "--config", str(config_file),
         "--", "true"],
        env=env, capture_output=True, text=True, check=False,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sprawl-orch exec failed: {done.stdout}{done.stderr}")
    return took


VARIANTS: dict[str, tuple[str, str]] = {  # name: (engine, [sandbox.container] userns)
    "docker": ("docker", "auto"),
    "docker-userns": ("docker", "auto"),
    "podman": ("podman", "off"),
    "podman-userns": ("podman", "auto"),
    "docker-runsc": ("docker", "auto"),
    "podman-runsc": ("podman", "off"),
}
# [sandbox.container] runtime per variant (unset: the engine's default, runc here)
RUNTIMES: dict[str, str] = {"docker-runsc": "runsc", "podman-runsc": "runsc"}


@contextlib.contextmanager
def daemon_for(variant: str) -> Iterator[dict[str, str]]:
    """The environment reaching the variant's engine (docker-userns: the second dockerd);
    os.environ follows it meanwhile, so image building reaches the same daemon."""
    saved = os.environ.get("DOCKER_HOST")
    if variant == "docker-userns":
        os.environ["DOCKER_HOST"] = os.environ.get(
            "SPRAWL_DOCKER_USERNS_HOST", "unix:///run/sprawl-orch/docker-userns.sock")
    try:
        yield {**os.environ, "PYTHONPATH": str(ROOT)}
    finally:
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved


def bench_engine(variant: str, reps: int, cli_reps: int, tmp: Path) -> dict[str, float]:
    name, userns = VARIANTS[variant]
    with daemon_for(variant) as env:
        return _bench(variant, name, userns, env, reps, cli_reps, tmp)


def _bench(variant: str, name: str, userns: str, env: dict[str, str], reps: int,
           cli_reps: int, tmp: Path) -> dict[str, float]:
    engine: Engine = DockerEngine(environ=env) if name == "docker" else PodmanEngine()
    image = build_busybox(name)
    try:
        runtime = RUNTIMES.get(variant)
        config = ContainerConfig(engine=name, images=EngineImages(**{name: image}),
                                 userns=userns, runtime=runtime)
        admission = admit(engine, config)
        if not admission.admitted:
            raise SystemExit(f"{variant} not admitted: {admission.reason}")
        if runtime is not None and not admission.gvisor:
            raise SystemExit(f"{variant}: not on runsc: {admission.notes}")
        if variant.endswith("-userns") and admission.userns is None:
            raise SystemExit(f"{variant}: no user namespace: {admission.userns_why}")
        arm = ContainerArm(config, engine)
        copy = tmp / f"{variant}-copy"
        copy.mkdir()
        (copy / "a.txt").write_text("x")
        flags = admission.userns.flags() if admission.userns else ()
        raw = raw_run_argv(engine, config, image, copy, admission.runtime, flags,
                           admission.gvisor)
        ours_once(arm, copy, tmp / f"{variant}-out", 0, f"warm{os.getpid()}")  # warm caches
        raw_once(raw, env)
        ours, plain = [], []
        for n in range(1, reps + 1):
            ours.append(ours_once(arm, copy, tmp / f"{variant}-out", n, f"bench{os.getpid()}"))
            plain.append(raw_once(raw, env))
        cli: list[float] = []
        if cli_reps:
            work = tmp / f"{variant}-work"
            work.mkdir()
            (work / "a.txt").write_text("x")
            conf = tmp / f"{variant}.toml"
            conf.write_text(
                f'[sandbox]\narm = "container"\nscratch_dir = "{tmp / "scratch"}"\n'
                f'[sandbox.container]\nengine = "{name}"\nuserns = "{userns}"\n'
                + (f'runtime = "{runtime}"\n' if runtime else "") +
                f'[sandbox.container.images]\n{name} = "{image}"\n'
                f'[state]\ndir = "{tmp / "state"}"\n'
            )
            cli = [cli_once(work, conf, env) for _ in range(cli_reps)]
        arm.close()
    finally:
        subprocess.run([name, "rmi", image], capture_output=True, check=False, env=env)
    return {
        "ours": statistics.median(ours),
        "raw": statistics.median(plain),
        "cli": statistics.median(cli) if cli else float("nan"),
        "runtime": 0.0 if admission.runtime is None else 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--cli-reps", type=int, default=5)
    parser.add_argument("--engines", default=",".join(VARIANTS),
                        help=f"variants, comma-separated: {', '.join(VARIANTS)}")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-") as tmp:
        for name in args.engines.split(","):
            results[name] = bench_engine(name, args.reps, args.cli_reps, Path(tmp))
    print(f"\nper-command medians, `true` in busybox, {args.reps} reps "
          f"({args.cli_reps} for the CLI)")
    print(f"{'engine':13} {'ours (library)':>15} {'raw run --rm':>13} {'ratio':>6} "
          f"{'CLI exec':>9} {'CLI/raw':>8}")
    for name, r in results.items():
        ratio = r["ours"] / r["raw"]
        print(f"{name:13} {ms(r['ours']):>12} ms {ms(r['raw']):>10} ms {ratio:>6.2f} "
              f"{ms(r['cli']):>6} ms {r['cli'] / r['raw']:>8.2f}")
    if "docker" in results:
        ratio = results["docker"]["ours"] / results["docker"]["raw"]
        print(f"\ngoal ours/raw docker <= 1.15: {'met' if ratio <= 1.15 else 'NOT met'} "
              f"({ratio:.2f})")
    for engine in ("docker", "podman"):
        if engine in results and f"{engine}-runsc" in results:
            plain = results[engine]["ours"] / results[engine]["raw"]
            gv = results[f"{engine}-runsc"]["ours"] / results[f"{engine}-runsc"]["raw"]
            print(f"goal ours/raw {engine}-runsc <= ours/raw {engine}: "
                  f"{'met' if gv <= plain else 'NOT met'} ({gv:.2f} vs {plain:.2f})")


if __name__ == "__main__":
    main()
