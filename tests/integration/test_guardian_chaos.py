"""Guardian chaos (design §15): SIGKILL the orchestrator at random moments of random execs on
docker, podman and copied_tree; afterwards no container of the sessions, no scratch copy and
no process the commands started may remain.

RUNS runs, PARALLEL at a time (each a driver running ExecTool, guardian_driver.py). The kill
comes a uniformly random time after the driver is ready (its arm admitted), so it lands in
syncing, creating, verifying, starting, running, collecting, removing or closing. Set
SPRAWL_CHAOS_SEED to replay a run. Prints the counts it checks.
"""

from __future__ import annotations

import collections
import os
import random
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from guardian_support import (
    Orchestrator,
    force_remove,
    guardian_events,
    guardian_outcome,
    marked_processes,
    scratch_copies,
    sessions_left,
    spec,
    wait_for,
)

RUNS = 54
PARALLEL = 3
# Each test run's sessions share a prefix of their own: another session on this machine may be
# running this very test, and its containers and processes are not ours to count.
PREFIX = "chaos"
# Upper bound of the kill delay after `ready`, per arm: about two short commands' worth.
KILL_WITHIN = {"docker": 3.0, "podman": 4.5, "copied_tree": 1.5}
COMMANDS: list[list[str]] = [
    ["true"],
    ["sleep", "0.3"],
    ["sleep", "300"],
    ["sh", "-c", "echo x > out.txt; sleep 1"],
    ["sh", "-c", "sleep 300 & sleep 300"],
]


@dataclass
class Outcome:
    arm: str
    session: str
    delay: float
    last_line: str = ""
    guardian: dict[str, Any] = field(default_factory=dict)
    eof: dict[str, Any] = field(default_factory=dict)  # what the guardian was holding
    scratch_left: list[str] = field(default_factory=list)


def one_run(arm: str, image: str | None, tmp: Path, rng: random.Random, prefix: str) -> Outcome:
    session = f"{prefix}{secrets.token_hex(4)}"
    commands = [rng.choice(COMMANDS) for _ in range(rng.randint(2, 4))]
    # A short window sometimes, so the window's own kill path is interrupted too.
    window = rng.choice([1.0, 600.0])
    log = tmp / "guardian.log"
    orch = Orchestrator(spec(session, arm, tmp, commands, image=image, timeout=window), log)
    outcome = Outcome(arm, session, rng.uniform(0, KILL_WITHIN[arm]))
    orch.wait_line("ready")
    time.sleep(outcome.delay)
    orch.sigkill()
    outcome.last_line = orch.seen[-1] if orch.seen else ""
    while not orch.lines.empty():
        line = orch.lines.get()
        outcome.last_line = line or outcome.last_line
    outcome.guardian = guardian_outcome(log, session)
    outcome.eof = next((e for e in guardian_events(log) if e["event"] == "eof"), {})
    outcome.scratch_left = scratch_copies(tmp / "scratch")
    return outcome


def described(proc: psutil.Process) -> str:
    """What a process left behind is, for the failure's message (its status alone said
    nothing: `[{'status': 'sleeping'}]`)."""
    try:
        return f"{proc.pid} ({proc.ppid()}) {proc.status()}: {' '.join(proc.cmdline())[:300]}"
    except psutil.Error as err:
        return f"{proc.pid}: gone ({err})"


def test_sigkill_at_random_moments_leaves_nothing(
    docker_image: str, podman_image: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SPRAWL_CHAOS_SEED", secrets.randbits(32)))
    rng = random.Random(seed)
    arms = (["docker", "podman", "copied_tree"] * RUNS)[:RUNS]
    rng.shuffle(arms)
    images = {"docker": docker_image, "podman": podman_image, "copied_tree": None}
    prefix = f"{PREFIX}{secrets.token_hex(3)}x"
    started = time.monotonic()
    jobs = []
    with ThreadPoolExecutor(PARALLEL) as pool:
        for n, arm in enumerate(arms):
            run_dir = tmp_path / f"run{n:02d}"
            run_dir.mkdir()
            jobs.append(
                pool.submit(
                    one_run, arm, images[arm], run_dir, random.Random(rng.getrandbits(32)), prefix
                )
            )
        outcomes = [job.result() for job in jobs]
    # Orphaned engine CLIs (a `podman start --attach` of a removed container, a create that
    # was refused) end on their own once the guardian has done its work.
    wait_for(lambda: not marked_processes(prefix), 15, step=0.2)
    processes = marked_processes(prefix)
    left = {engine: sessions_left(engine, prefix) for engine in ("docker", "podman")}
    copies = [c for o in outcomes for c in o.scratch_left]
    try:
        phases = collections.Counter(o.last_line.split(" ")[0] for o in outcomes)
        late = sum(len(o.guardian.get("late", [])) for o in outcomes)
        never = sum(1 for o in outcomes if not o.guardian)
        held: collections.Counter[str] = collections.Counter()
        for o in outcomes:
            announced = o.eof.get("containers", {})
            held["create in flight"] += any(cid is None for cid in announced.values())
            held["container created"] += any(cid for cid in announced.values())
            held["process group"] += bool(o.eof.get("pgroups"))
            held["scratch copy"] += bool(o.eof.get("scratch"))
        print(
            f"\nguardian chaos: seed {seed}, {len(outcomes)} runs "
            f"({collections.Counter(arms)}) in {time.monotonic() - started:.0f} s; "
            f"killed after: {dict(phases)}; late creates removed: {late}; "
            f"killed before any guardian was needed: {never}; runs whose guardian held, "
            f"at EOF: {dict(held)}\n"
            f"left behind: containers docker={len(left['docker'])} "
            f"podman={len(left['podman'])}, scratch copies={len(copies)}, "
            f"processes={len(processes)}"
        )
        assert left == {"docker": [], "podman": []}
        assert copies == [], [
            (o.arm, o.session, o.last_line, o.scratch_left, o.guardian)
            for o in outcomes
            if o.scratch_left
        ]
        assert [described(p) for p in processes] == []
        assert [o for o in outcomes if o.guardian.get("left") or "missing" in o.guardian] == []
    finally:
        for o in outcomes:
            for engine in ("docker", "podman"):
                force_remove(engine, o.session)
        for proc in processes:
            proc.kill()
