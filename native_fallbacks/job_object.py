"""Windows (`windows_job`): an AppContainer with no capabilities inside a Job Object (design §6).

- **AppContainer**, zero capabilities: no network (not even loopback: AppContainers are
  loopback-isolated), and a principal of its own -- every access check needs both the
  user's SID and the AppContainer SID to be granted, so the caller's files are out of reach
  unless an ACL names the container. The copy is granted to it (an inheritable ACE on the
  copy's root; files the sync makes later inherit it). The base user SID is unchanged: no
  new Windows account is claimed.
- **Job Object**: kill-on-close (our handle dying takes the tree with it), a committed-memory
  cap for the whole job (`JOB_OBJECT_LIMIT_JOB_MEMORY`; the working-set limit would cap
  resident pages, not commitment, and needs a privilege on some tokens), an active-process
  cap, and a hard CPU-rate cap. When the command ends, whatever is left in the job is
  terminated: nothing it started outlives it.
- **Start order**: the process is created *suspended*, assigned to the job, and only then
  resumed, so not one instruction runs outside the job (a child started before assignment
  would escape it). `START_PLAN` is that order; `run_plan` executes it and undoes what was
  done when a step fails (a suspended process whose assignment failed is terminated, never
  resumed).

Everything here is pure and tested on every platform; the Win32 calls live in
`native_fallbacks.win32` and are imported only on Windows.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from sprawl_orch.arms import ASSURANCES, ArmName
from sprawl_orch.assurances import Assurances
from sprawl_orch.config import ContainerConfig
from sprawl_orch.launch import Launch, Running

if TYPE_CHECKING:
    from sprawl_orch.native_fallbacks.win32 import AppContainer

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


def job_available() -> tuple[bool, str]:
    """Offerings' sample: can this machine make a limited job and an AppContainer?"""
    if sys.platform != "win32":
        return False, f"not Windows ({sys.platform})"
    from sprawl_orch.native_fallbacks.win32 import probe

    return probe()


class JobObjectArm:
    """The `windows_job` arm: its own `Running`, no host process group."""

    name: ArmName = ArmName.WINDOWS_JOB

    def __init__(self, limits: ContainerConfig, cpu_count: int | None = None) -> None:
        self.limits = job_limits(
            limits.memory_bytes, limits.cpus, limits.pids, cpu_count or os.cpu_count() or 1
        )
        self.profile = profile_name(os.getpid(), secrets.token_hex(4))
        self._container: AppContainer | None = None
        self._granted: set[Path] = set()

    def assurances(self) -> Assurances:
        return ASSURANCES[self.name]

    def note(self) -> str | None:
        return (
            "It runs under the AppContainer SID; your Windows account is unchanged, and the "
            "container reaches only what an ACL grants it (the copy)."
        )

    def prepare(self, workdir: Path) -> None:
        from sprawl_orch.native_fallbacks.win32 import AppContainer, refuse

        ok, why = job_available()
        if not ok:
            raise refuse(why)
        if self._container is None:
            self._container = AppContainer.open(self.profile)

    def start(self, launch: Launch) -> Running:
        from sprawl_orch.native_fallbacks.win32 import start_in_job

        assert self._container is not None, "prepare() runs before start()"
        grant = launch.cwd not in self._granted
        running = start_in_job(
            launch, self._container, self.limits, START_PLAN, grant_copy=grant
        )
        self._granted.add(launch.cwd)
        return running

    def close(self) -> None:
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.delete()
            self._container = None
