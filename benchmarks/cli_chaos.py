"""SIGKILL `sprawl-orch exec` at random moments of its first 1.5 s; count what is left.

    . .ci/env && python benchmarks/cli_chaos.py [--kills 100] [--within 1.5] [--seed S]

Each kill: a fresh `sprawl-orch exec` process on docker or podman (alternating), a command
that is short or long, SIGKILLed a uniformly random 0..WITHIN s after it was started --
so it lands in interpreter start, imports, admission (every third run starts from an empty
state directory: admission's probe container runs), the copy, the create, the
verification, the run or the removal. Afterwards, once the guardians are done:

- containers: every container (docker and podman) whose bind mount comes from this run's
  directory -- the commands' copies and admission's probe directories both live there
  (`[sandbox] scratch_dir`, and TMPDIR for the probes), so other people's containers on
  the same engines are never counted;
- probe directories (`sprawl-probe-*`) and scratch copies left in this run's directory;
- processes: any carrying this run's marker in its environment (the CLI, the guardian it
  spawned) or this run's directory on its command line (an engine CLI);
- persistent copies (`<state>/copies/<key>/<slot>/`, kept between calls): none still
  locked (a killed call's flock dies with it), and a normal call afterwards resyncs one and
  reads the person's file through it;
- the person's tree: unchanged;
- output directories (`<state>/outputs/<session>/`, a running command's streams): a killed
  CLI never removes its own; the next call of the same state directory must (one call is
  made in every state directory that still has one), so none is left afterwards;
- kept outputs (`<state>/kept-output/`): their count and bytes, within the default budget.

With --warm-served (issue 26): `warm = true`, every call through the exec server (the
`sprawl-orch` program, a runtime directory of this run's own), and every 7th kill SIGKILLs
the server too; the server is stopped before counting, so every container it kept must be
gone as well (the guardian removes them: core/served_warm.py).

Prints the counts and exits 1 if anything was left. Not a timing: a check with numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.images.build import build_busybox
from sprawl_orch.runs.output_keep import BUDGET_BYTES

ROOT = Path(__file__).resolve().parent.parent
CLI = [
    sys.executable,
    "-c",
    "import sys; from sprawl_orch.cli import main; sys.argv[0] = 'sprawl-orch'; main()",
]
COMMANDS = [
    ["true"],
    ["sh", "-c", "echo x > out.txt"],
    ["sleep", "30"],
    ["sh", "-c", "head -c 5000000 /dev/zero; sleep 30"],  # an output directory worth seeing
]
MARK = "SPRAWL_CHAOS_MARK"
SETTLE_SECONDS = 120.0


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))


def config(
    path: Path,
    engine: str,
    image: dict[str, str],
    state: Path,
    scratch: Path,
    warm: bool = False,
) -> Path:
    path.write_text(
        f'[sandbox]\narm = "container"\nscratch_dir = "{scratch}"\n'
        f'[sandbox.container]\nengine = "{engine}"\nwarm = {str(warm).lower()}\n'
        f'images = {{ docker = "{image["docker"]}", podman = "{image["podman"]}" }}\n'
        f'[state]\ndir = "{state}"\n'
    )
    return path


def ours(mark: str, base: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.pid == os.getpid():
                continue
            if (
                str(base) in " ".join(proc.info["cmdline"] or [])
                or proc.environ().get(MARK) == mark
            ):
                found.append(proc)
    return found


def held_at_eof(log: Path) -> dict[str, int]:
    """What the guardian was holding when each killed call's lifeline dropped: where the
    kills landed (a call killed before it announced anything never reached a guardian)."""
    held = {
        "calls that reached the guardian": 0,
        "probe container announced": 0,
        "command container announced": 0,
        "copy or probe directory announced": 0,
    }
    with contextlib.suppress(OSError):
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") != "eof":
                    continue
                names = list(event.get("containers") or {})
                held["calls that reached the guardian"] += 1
                held["probe container announced"] += any("-probe-" in n for n in names)
                held["command container announced"] += any("-probe-" not in n for n in names)
                held["copy or probe directory announced"] += bool(event.get("scratch"))
    return held


def locked_copies(base: Path) -> tuple[int, list[str]]:
    """(persistent copy slots found, those whose lock some process still holds)."""
    slots = sorted(base.glob("state*/copies/*/*/lock"))
    held = []
    for lock in slots:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(str(lock.parent.relative_to(base)))
        finally:
            os.close(fd)
    return len(slots), held


def containers_from(base: Path) -> dict[str, list[str]]:
    """Per engine: containers (any state) whose mounts come from under `base`."""
    left: dict[str, list[str]] = {}
    for engine in ("docker", "podman"):
        ids = subprocess.run(
            [engine, "ps", "-aq", "--no-trunc", "--filter", "label=sprawl.session"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        mine = []
        for cid in ids:
            done = subprocess.run(
                [engine, "inspect", cid], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                continue  # removed meanwhile
            mounts = json.loads(done.stdout)[0].get("Mounts") or []
            if any(str(m.get("Source", "")).startswith(str(base)) for m in mounts):
                mine.append(cid[:12])
        left[engine] = mine
    return left


def kill_server(runtime: Path) -> int:
    """SIGKILL this run's exec server, if one runs (its pid is in its lock file)."""
    for lock in (runtime / "sprawl-orch").glob("exec-*.sock.lock"):
        with contextlib.suppress(OSError, ValueError):  # none there, or gone: nothing to kill
            pid = int(lock.read_text().strip())
            if str(runtime).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
                return 1
    return 0


def next_call(
    state: Path, person: Path, images: dict[str, str], scratch: Path, env: dict[str, str]
) -> None:
    conf = config(state.parent / f"next-{state.name}.toml", "docker", images, state, scratch)
    subprocess.run(
        [*CLI, "exec", "-C", str(person), "--config", str(conf), "--", "true"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        check=False,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--within", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--warm-served", action="store_true", help="issue 26's served warm calls")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else secrets.randbits(32)
    rng = random.Random(seed)
    images = {e: build_busybox(e) for e in ("docker", "podman")}
    mark = secrets.token_hex(6)
    with tempfile.TemporaryDirectory(prefix="sprawl-chaos-") as tmp:
        base = Path(tmp)
        person = base / "tree"
        person.mkdir()
        (person / "a.txt").write_text("mine\n")
        (person / "sub").mkdir()
        (person / "sub" / "b.txt").write_text("also mine\n")
        before = tree_digest(person)
        scratch, probes = base / "scratch", base / "tmp"
        scratch.mkdir()
        probes.mkdir()
        env = {
            **os.environ,
            MARK: mark,
            "TMPDIR": str(probes),
            "SPRAWL_GUARDIAN_LOG": str(base / "guardian.log"),
        }
        phases: dict[str, int] = {"docker": 0, "podman": 0, "fresh-admission": 0, "server": 0}
        runtime = base / "run"
        runtime.mkdir(mode=0o700)
        cli = CLI
        if args.warm_served:
            cli = [PROGRAM]
            env["XDG_RUNTIME_DIR"] = str(runtime)
        for i in range(args.kills):
            engine = ("docker", "podman")[i % 2]
            fresh = i % 3 == 0
            state = base / (f"state-{i}" if fresh else "state")
            conf = config(base / f"c{i}.toml", engine, images, state, scratch, args.warm_served)
            command = rng.choice(COMMANDS)
            proc = subprocess.Popen(
                [*cli, "exec", "-C", str(person), "--config", str(conf), "--", *command],
                env=env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0, args.within))
            proc.send_signal(signal.SIGKILL)
            if args.warm_served and i % 7 == 6:
                phases["server"] += kill_server(runtime)
            proc.wait()
            phases[engine] += 1
            phases["fresh-admission"] += fresh
        if args.warm_served:
            subprocess.run([PROGRAM, "server", "stop"], env=env, capture_output=True, check=False)
        deadline = time.monotonic() + SETTLE_SECONDS
        while ours(mark, base) and time.monotonic() < deadline:
            time.sleep(0.5)
        processes = [
            f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in ours(mark, base) if p.is_running()
        ]
        containers = containers_from(base)
        probe_dirs = sorted(p.name for p in probes.glob("sprawl-probe-*"))
        copies = sorted(p.name for p in scratch.iterdir())
        unchanged = tree_digest(person) == before
        slots, held = locked_copies(base)
        landed = held_at_eof(base / "guardian.log")
        # what the killed calls left, before any next call removes it
        outputs_before = sum(1 for d in base.glob("state*/outputs/*") if d.is_dir())
        conf = config(base / "after.toml", "docker", images, base / "state", scratch)
        after = subprocess.run(
            [*CLI, "exec", "-C", str(person), "--config", str(conf), "--", "cat", "sub/b.txt"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        for st in sorted(base.glob("state-*")):
            if any((st / "outputs").glob("*")):
                # the next call of that state directory (the fresh-admission ones had none)
                next_call(st, person, images, scratch, env)
        outputs = sorted(
            f"{d.parent.parent.name}/{d.name}" for d in base.glob("state*/outputs/*") if d.is_dir()
        )
        kept = [d for d in base.glob("state*/kept-output/*") if d.is_dir()]
        kept_bytes = sum(f.stat().st_size for d in kept for f in d.iterdir())
        print(
            f"seed {seed}: {args.kills} SIGKILLs within {args.within:g} s of start "
            f"({phases['docker']} docker, {phases['podman']} podman, "
            f"{phases['fresh-admission']} from an empty state directory"
            + (
                f"; {phases['server']} exec servers SIGKILLed, warm = true)"
                if args.warm_served
                else ")"
            )
        )
        print(
            "where the kills landed (the guardian's view at each lifeline's end): "
            + ", ".join(f"{k} {v}" for k, v in landed.items())
        )
        print(
            f"containers left: docker {len(containers['docker'])}, podman "
            f"{len(containers['podman'])} {containers if any(containers.values()) else ''}"
        )
        print(f"probe directories left: {len(probe_dirs)} {probe_dirs or ''}")
        print(f"scratch copies left: {len(copies)} {copies or ''}")
        print(f"processes left: {len(processes)} {processes or ''}")
        print(f"persistent copies: {slots}, still locked: {len(held)} {held or ''}")
        print(
            f"output directories: {outputs_before} left by the kills, {len(outputs)} after the "
            f"next calls {outputs or ''}"
        )
        print(f"kept outputs: {len(kept)}, {kept_bytes} bytes (budget {BUDGET_BYTES})")
        print(
            f"the person's tree unchanged: {unchanged}; a call afterwards: exit "
            f"{after.returncode}, read {after.stdout.strip()!r}"
        )
        clean = not (
            any(containers.values()) or probe_dirs or copies or processes or held or outputs
        ) and (kept_bytes <= BUDGET_BYTES)
        ok = clean and unchanged and after.returncode == 0 and after.stdout == "also mine\n"
        if not ok:
            for engine, ids in containers.items():
                if ids:
                    subprocess.run([engine, "rm", "-f", *ids], capture_output=True, check=False)
            with contextlib.suppress(OSError):
                print((base / "guardian.log").read_text()[-4000:])
        print("clean" if ok else "LEFT BEHIND")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
