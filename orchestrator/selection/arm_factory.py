"""Turn a `Choice` into the arm object that runs commands (chosen once, delegated to).

Backends are imported only when chosen: the container arm pulls in the docker
SDK, the Windows arm ctypes/pywin32.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sprawl_orch.config import Config
from sprawl_orch.config.state import ledger_path, state_dir
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.launch import Arm, Watcher
from sprawl_orch.runs.yielding import Yielders
from sprawl_orch.selection.choice import Choice
from sprawl_orch.selection.offerings import Offerings

if TYPE_CHECKING:
    from sprawl_orch.container.evidence import Evidence


def yielders_of(offerings: Offerings) -> Yielders:
    return Yielders(nice=offerings.nice, ionice=offerings.ionice, taskpolicy=offerings.taskpolicy)


def own_places(config: Config, environ: Mapping[str, str] | None) -> list[Path]:
    """Where sprawl-orch keeps copies, changes, output and the ledger for this caller."""
    env = os.environ if environ is None else environ
    places = [state_dir(config, env), ledger_path(config, env)]
    if config.sandbox.scratch_dir is not None:
        places.append(config.sandbox.scratch_dir.expanduser())
    return places


def build_arm(
    choice: Choice,
    offerings: Offerings,
    config: Config,
    *,
    evidence: Evidence | None = None,
    watcher: Watcher | None = None,
    environ: Mapping[str, str] | None = None,
) -> Arm:
    """`evidence`, `watcher`: where a container engine's admission is kept, and who hears of
    its probe containers (the guardian). `environ`: the caller's, for where sprawl-orch's
    own places are (never in a sandbox's view) and whose HOME is the view's reference."""
    yielders = yielders_of(offerings)
    if choice.arm is ArmName.COPIED_TREE:
        from sprawl_orch.native_fallbacks.copied_tree import CopiedTreeArm

        return CopiedTreeArm(yielders)
    if choice.arm is ArmName.LINUX_NAMESPACES:
        from sprawl_orch.native_fallbacks.bwrap import BwrapArm

        assert offerings.bwrap is not None
        return BwrapArm(
            offerings.bwrap,
            yielders,
            places=own_places(config, environ),
            caller_home=(environ or {}).get("HOME"),
        )
    if choice.arm is ArmName.LANDLOCK:
        from sprawl_orch.native_fallbacks.landlock import LandlockArm

        return LandlockArm(
            yielders,
            places=own_places(config, environ),
            caller_home=(environ or {}).get("HOME"),
            found=offerings.landlock_abi,
        )
    if choice.arm is ArmName.MACOS_SEATBELT:
        from sprawl_orch.native_fallbacks.seatbelt import SeatbeltArm

        assert offerings.sandbox_exec is not None
        return SeatbeltArm(offerings.sandbox_exec, yielders)
    if choice.arm is ArmName.WINDOWS_JOB:
        from sprawl_orch.native_fallbacks.job_object import JobObjectArm

        return JobObjectArm(config.sandbox.container)
    if choice.arm is ArmName.PYTHON:
        from sprawl_orch.native_fallbacks.wasi_python import WasiPythonArm

        return WasiPythonArm(config.sandbox.python, state_dir(config, environ or os.environ))
    if choice.arm is ArmName.CONTAINER:
        from sprawl_orch.container.arm import ContainerArm

        assert choice.engine is not None
        offer = offerings.engine(choice.engine)
        assert offer is not None
        return ContainerArm.from_offer(
            offer, config.sandbox.container, evidence=evidence, watcher=watcher
        )
    faults = [m for m in choice.missing if m.kind == "config_invalid"]
    if faults:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID, faults[0].subject, faults[0].phrase, faults[0].recovery
        )
    raise SprawlError(
        ErrorCode.SANDBOX_DENIED,
        subject=f"[sandbox] arm = {choice.asked!r}",
        detail=choice.reason(recovery=False),
        recovery="; ".join(m.recovery for m in choice.missing) or "see sprawl-orch doctor",
    )
