"""The Windows arm's pure parts (design §6): the start plan and its undo, the Job Object's
limits, the AppContainer profile's name, the command line and the environment block.

A leaf of its own because both sides need it: `job_object` (the arm, on every platform) and
`win32` (the ctypes calls, Windows only), which used to import these from `job_object` while
`job_object` imported it back.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

# winnt.h
JOB_OBJECT_LIMIT_ACTIVE_PROCESS = 0x00000008
JOB_OBJECT_LIMIT_JOB_MEMORY = 0x00000200
JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION = 0x00000400
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
JOB_OBJECT_CPU_RATE_CONTROL_ENABLE = 0x1
JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP = 0x4
# winbase.h
CREATE_SUSPENDED = 0x00000004
CREATE_UNICODE_ENVIRONMENT = 0x00000400
BELOW_NORMAL_PRIORITY_CLASS = 0x00004000
EXTENDED_STARTUPINFO_PRESENT = 0x00080000
CREATE_NO_WINDOW = 0x08000000

# Suspended until assigned; below normal priority is Windows' form of yielding (design §7);
# no console window of its own.
CREATION_FLAGS = (
    EXTENDED_STARTUPINFO_PRESENT
    | CREATE_SUSPENDED
    | CREATE_UNICODE_ENVIRONMENT
    | CREATE_NO_WINDOW
    | BELOW_NORMAL_PRIORITY_CLASS
)
# CreateAppContainerProfile: "up to 64 characters"; letters, digits, '.', '-' and '_'.
PROFILE_NAME_MAX = 64
CPU_RATE_FULL = 10_000  # hundredths of a percent of the whole machine


class Step(StrEnum):
    CREATE_JOB = "create_job"
    LIMIT_JOB = "limit_job"
    GRANT_COPY = "grant_copy"
    CREATE_SUSPENDED = "create_suspended"
    ASSIGN = "assign_to_job"
    RESUME = "resume"


START_PLAN: tuple[Step, ...] = (
    Step.CREATE_JOB,
    Step.LIMIT_JOB,
    Step.GRANT_COPY,
    Step.CREATE_SUSPENDED,
    Step.ASSIGN,
    Step.RESUME,
)

# An action does its step and returns how to undo it (None: nothing to undo).
Undo = Callable[[], None]
Action = Callable[[], Undo | None]


def check_plan(plan: Sequence[Step]) -> None:
    """The order that keeps every instruction of the command inside the limited job."""
    order = {step: i for i, step in enumerate(plan)}
    for step in Step:
        if step not in order:
            raise ValueError(f"the start plan lacks {step.value}")
    for before, after in (
        (Step.CREATE_JOB, Step.LIMIT_JOB),
        (Step.LIMIT_JOB, Step.CREATE_SUSPENDED),
        (Step.GRANT_COPY, Step.CREATE_SUSPENDED),
        (Step.CREATE_SUSPENDED, Step.ASSIGN),
        (Step.ASSIGN, Step.RESUME),
    ):
        if order[before] > order[after]:
            raise ValueError(f"{before.value} must come before {after.value}")


def run_plan(plan: Sequence[Step], actions: Mapping[Step, Action]) -> None:
    """Run each step in order; when one raises, undo the done ones in reverse and re-raise."""
    check_plan(plan)
    undo: list[Undo] = []
    try:
        for step in plan:
            done = actions[step]()
            if done is not None:
                undo.append(done)
    except BaseException:
        for step_undo in reversed(undo):
            with contextlib.suppress(Exception):
                step_undo()
        raise


@dataclass(frozen=True)
class JobLimits:
    limit_flags: int
    job_memory: int
    active_processes: int
    cpu_rate: int
    cpu_flags: int


def job_limits(memory_bytes: int, cpus: float, pids: int, cpu_count: int) -> JobLimits:
    """The Job Object's limits from `[sandbox.container]`'s memory, CPUs and pids. Pure."""
    share = cpus / max(1, cpu_count)
    rate = max(1, min(CPU_RATE_FULL, round(share * CPU_RATE_FULL)))
    return JobLimits(
        limit_flags=JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        | JOB_OBJECT_LIMIT_JOB_MEMORY
        | JOB_OBJECT_LIMIT_ACTIVE_PROCESS
        | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
        job_memory=memory_bytes,
        active_processes=pids,
        cpu_rate=rate,
        cpu_flags=JOB_OBJECT_CPU_RATE_CONTROL_ENABLE | JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP,
    )


def profile_name(pid: int, token: str) -> str:
    """The AppContainer profile's name: one per arm instance, removed at close."""
    name = f"sprawl-orch.{pid}.{token}"
    if len(name) > PROFILE_NAME_MAX or not all(c.isalnum() or c in ".-_" for c in name):
        raise ValueError(f"{name!r} is not a valid AppContainer profile name")
    return name


def command_line(argv: Sequence[str]) -> str:
    """One command line for CreateProcessW, quoted the way the MSVC runtime splits it."""
    return subprocess.list2cmdline(list(argv))


def environment_block(env: Mapping[str, str]) -> str:
    """A CREATE_UNICODE_ENVIRONMENT block: NAME=value entries sorted case-insensitively
    (CreateProcess requires the order), each NUL-ended, then one more NUL."""
    for name in env:
        if not name or "=" in name or "\0" in name or "\0" in env[name]:
            raise ValueError(f"{name!r} cannot be put in a Windows environment block")
    entries = sorted(env.items(), key=lambda kv: kv[0].upper())
    return "".join(f"{k}={v}\0" for k, v in entries) + "\0"
