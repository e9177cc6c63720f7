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
Runs are interleaved across every variant (rep n: ours and raw of each variant, then rep
n+1), so machine noise hits all arms alike. Prints medians and ratios, and each userns /
runsc variant's ratio beside its plain arm's: the goal is variant <= plain, and
ours/raw(docker) <= 1.15.
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
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.config import ContainerConfig, EngineImages
from sprawl_orch.container.admission import admit
from sprawl_orch.container.argv import HostLimits, create_argv
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.engines.podman import PodmanEngine
from sprawl_orch.images.build import build_busybox
from sprawl_orch.runs.launch import Launch

ROOT = Path(__file__).resolve().parent.parent
# the `sprawl-orch` console script, without needing the package installed
CLI = "import sys; from sprawl_orch.cli import main; sys.argv[0] = 'sprawl-orch'; main()"


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def raw_run_argv(
    engine: ContainerEngine,
    config: ContainerConfig,
    image: str,
    copy: Path,
    runtime: str | None,
    userns: tuple[str, ...] = (),
    gvisor: bool = False,
) -> list[str]:
    """Our create argv turned into `run --rm` (no name/labels: the raw mechanism)."""
    argv = list(
        create_argv(
            engine.name,
            config,
            image,
            copy,
            ["true"],
            [],
            "raw-1",
            "raw",
            "raw",
            runtime,
            host=HostLimits.this_host(),
            userns=userns,
            gvisor=gvisor,
        )
    )
    for flag in ("--name", "--label", "--label"):
        at = argv.index(flag)
        del argv[at : at + 2]
    argv[0:1] = ["run", "--rm"]
    return list(engine.cli_argv(argv))


def ours_once(arm: ContainerArm, copy: Path, out: Path, n: int, session: str) -> float:
    launch = Launch(
        argv=("true",),
        cwd=copy,
        env={},
        outputs=out / str(n),
        tag=f"{session}-{n}",
        session=session,
        run="bench",
    )
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
        [
            sys.executable,
            "-c",
            CLI,
            "exec",
            "-C",
            str(workdir),
            "--config",
            str(config_file),
            "--",
            "true",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
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
            "SPRAWL_DOCKER_USERNS_HOST", "unix:///run/sprawl-orch/docker-userns.sock"
        )
    try:
        yield {**os.environ, "PYTHONPATH": str(ROOT)}
    finally:
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved


@dataclass
class Variant:
    """One variant set up for the interleaved loop: its arm, raw argv and timings."""

    name: str
    engine: str
    userns: str
    runtime: str | None
    env: dict[str, str]
    image: str
    arm: ContainerArm
    copy: Path
    raw: list[str]
    ours: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    cli: list[float] = field(default_factory=list)

    def median(self, what: str) -> float:
        found: list[float] = getattr(self, what)
        return statistics.median(found) if found else float("nan")


def set_up(variant: str, tmp: Path) -> Variant:
    name, userns = VARIANTS[variant]
    with daemon_for(variant) as env:
        engine: ContainerEngine = DockerEngine(environ=env) if name == "docker" else PodmanEngine()
        image = build_busybox(name)
    runtime = RUNTIMES.get(variant)
    config = ContainerConfig(
        engine=name, images=EngineImages(**{name: image}), userns=userns, runtime=runtime
    )
    admission = admit(engine, config)
    if not admission.admitted:
        raise SystemExit(f"{variant} not admitted: {admission.reason}")
    if runtime is not None and not admission.gvisor:
        raise SystemExit(f"{variant}: not on runsc: {admission.notes}")
    if variant.endswith("-userns") and admission.userns is None:
        raise SystemExit(f"{variant}: no user namespace: {admission.userns_why}")
    if not variant.endswith("-userns") and admission.userns is not None:
        raise SystemExit(f"{variant}: expected no user namespace, got {admission.userns.mode}")
    copy = tmp / f"{variant}-copy"
    copy.mkdir()
    (copy / "a.txt").write_text("x")
    flags = admission.userns.flags() if admission.userns else ()
    return Variant(
        variant,
        name,
        userns,
        runtime,
        env,
        image,
        ContainerArm(config, engine),
        copy,
        raw_run_argv(engine, config, image, copy, admission.runtime, flags, admission.gvisor),
    )


def cli_run(v: Variant, tmp: Path) -> None:
    work = tmp / f"{v.name}-work"
    work.mkdir(exist_ok=True)
    (work / "a.txt").write_text("x")
    conf = tmp / f"{v.name}.toml"
    conf.write_text(
        f'[sandbox]\narm = "container"\nscratch_dir = "{tmp / "scratch"}"\n'
        f'[sandbox.container]\nengine = "{v.engine}"\nuserns = "{v.userns}"\n'
        + (f'runtime = "{v.runtime}"\n' if v.runtime else "")
        + f'[sandbox.container.images]\n{v.engine} = "{v.image}"\n'
        f'[state]\ndir = "{tmp / "state"}"\n'
    )
    v.cli.append(cli_once(work, conf, v.env))


def run(names: list[str], reps: int, cli_reps: int, tmp: Path) -> list[Variant]:
    """Every variant in one loop: rep n runs ours and raw of each variant before rep n+1,
    so load from the other engineers' suites falls on every arm alike."""
    variants: list[Variant] = []
    try:
        for name in names:
            variants.append(set_up(name, tmp))
        for v in variants:  # warm caches (admission, images, the copy's owner)
            ours_once(v.arm, v.copy, tmp / f"{v.name}-out", 0, f"warm{os.getpid()}")
            raw_once(v.raw, v.env)
        for n in range(1, reps + 1):
            for v in variants:
                v.ours.append(
                    ours_once(v.arm, v.copy, tmp / f"{v.name}-out", n, f"bench{os.getpid()}")
                )
                v.plain.append(raw_once(v.raw, v.env))
        for _ in range(cli_reps):
            for v in variants:
                cli_run(v, tmp)
    finally:
        for v in variants:
            v.arm.close()
            subprocess.run([v.engine, "rmi", v.image], capture_output=True, check=False, env=v.env)
    return variants


def report(variants: list[Variant], reps: int, cli_reps: int) -> None:
    print(
        f"\nper-command medians, `true` in busybox, {reps} reps interleaved "
        f"({cli_reps} for the CLI)"
    )
    print(
        f"{'engine':13} {'ours (library)':>15} {'raw run --rm':>13} {'ratio':>6} "
        f"{'CLI exec':>9} {'CLI/raw':>8}"
    )
    ratio = {}
    for v in variants:
        ratio[v.name] = v.median("ours") / v.median("plain")
        print(
            f"{v.name:13} {ms(v.median('ours')):>12} ms {ms(v.median('plain')):>10} ms "
            f"{ratio[v.name]:>6.2f} {ms(v.median('cli')):>6} ms "
            f"{v.median('cli') / v.median('plain'):>8.2f}"
        )
    print(
        "\nagainst the plain arm (goal: the variant's ratio <= the plain arm's; one run "
        "under load moves a ratio by 0.1 or more: read several)"
    )
    for kind in ("userns", "runsc"):
        for plain in ("docker", "podman"):
            other = f"{plain}-{kind}"
            if plain in ratio and other in ratio:
                print(
                    f"  {other:14} plain {ratio[plain]:.2f}  {kind} {ratio[other]:.2f}  "
                    f"{kind} - plain {ratio[other] - ratio[plain]:+.2f}"
                )
    if "docker" in ratio:
        print(
            f"goal ours/raw docker <= 1.15: {'met' if ratio['docker'] <= 1.15 else 'NOT met'} "
            f"({ratio['docker']:.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--cli-reps", type=int, default=5)
    parser.add_argument(
        "--engines",
        default=",".join(VARIANTS),
        help=f"variants, comma-separated: {', '.join(VARIANTS)}",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-") as tmp:
        variants = run(args.engines.split(","), args.reps, args.cli_reps, Path(tmp))
    report(variants, args.reps, args.cli_reps)


if __name__ == "__main__":
    main()
