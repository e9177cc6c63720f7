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

The pure parts (plan, limits, names) live in `native_fallbacks.job_plan` and are tested on
every platform; the Win32 calls live in `native_fallbacks.win32` and are imported only on
Windows.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sprawl_orch.config import ContainerConfig
from sprawl_orch.core.arms import ASSURANCES, ArmName
from sprawl_orch.core.assurances import Assurances
from sprawl_orch.native_fallbacks.job_plan import START_PLAN, job_limits, profile_name
from sprawl_orch.runs.launch import Launch, Running

if TYPE_CHECKING:
    from sprawl_orch.native_fallbacks.win32 import AppContainer


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
        running = start_in_job(launch, self._container, self.limits, START_PLAN, grant_copy=grant)
        self._granted.add(launch.cwd)
        return running

    def close(self) -> None:
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.delete()
            self._container = None
