"""`sprawl-orch doctor` as a value (design §13): what this machine offers, from one `Offerings`.

One row per arm -- the container arm per engine, the platform's native arm, the copied
tree -- each with its five axes and, when it can't run, what is missing and what to do;
which arm `auto` (and the configured spelling) resolves to and why; the shell and pwsh;
and whether the cgroup is delegated. Pure: the machine is read by the caller
(`Offerings.this_machine`, `resolve_shell`, `cgroups.delegation`) and passed in, so tests
describe machines instead of borrowing one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sprawl_orch.config import Config
from sprawl_orch.core.arms import (
    ASSURANCES,
    ArmName,
    Missing,
    container_assurances,
    landlock_assurances,
    linux_namespaces_assurances,
)
from sprawl_orch.core.assurances import Assurances, statement
from sprawl_orch.core.shell import Absent, Found, Shell, resolve_shell
from sprawl_orch.egress.offer import doctor_line
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.engines.podman_pause import pause_note
from sprawl_orch.runs.cgroups import Delegation, PlatformShares
from sprawl_orch.selection.choice import Choice, choose
from sprawl_orch.selection.offerings import Offerings


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MissingRow(_Row):
    kind: str
    phrase: str
    recovery: str

    @classmethod
    def of(cls, missing: Missing) -> MissingRow:
        return cls(kind=missing.kind, phrase=missing.phrase, recovery=missing.recovery)


class ArmRow(_Row):
    label: str  # what the table shows: "container (docker)", "linux_namespaces"
    arm: str
    engine: str | None = None
    available: bool
    assurances: dict[str, str]
    statement: str
    detail: str = ""
    missing: list[MissingRow] = []
    # Whether `[sandbox.network] allow` is offered and how the proxy is reached (egress/).
    egress: str = ""


class Resolution(_Row):
    asked: str
    arm: str
    engine: str | None = None
    reason: str
    missing: list[MissingRow] = []


class ShellRow(_Row):
    asked: str
    state: Literal["absent", "missing", "found"]
    program: str | None = None
    interpreter: str | None = None
    detail: str = ""


class CgroupRow(_Row):
    delegated: bool
    version: str | None
    shares: str
    detail: str


class DoctorReport(_Row):
    platform: str
    scratch: str | None
    scratch_problem: str | None = None
    yielding: str
    arms: list[ArmRow]
    auto: Resolution
    configured: Resolution
    shell: ShellRow
    pwsh: ShellRow
    cgroup: CgroupRow
    # Set for a non-root caller whose rootless podman keeps its pause process (podman's own).
    podman_pause: str | None = None


def _root_caller() -> bool:
    # A root caller's bwrap runs as a uid of its own (native_fallbacks/bwrap.py).
    return hasattr(os, "geteuid") and os.geteuid() == 0


def native_arm(platform: str) -> ArmName | None:
    if platform.startswith("linux"):
        return ArmName.LINUX_NAMESPACES
    return {"darwin": ArmName.MACOS_SEATBELT, "win32": ArmName.WINDOWS_JOB}.get(platform)


def _axes(assurances: Assurances) -> dict[str, str]:
    return {axis.value: kept.value for axis, kept in assurances.axes().items()}


def _row(
    label: str,
    arm: ArmName,
    assurances: Assurances,
    choice: Choice,
    engine: str | None = None,
    detail: str = "",
) -> ArmRow:
    available = choice.arm is not ArmName.UNAVAILABLE
    return ArmRow(
        label=label,
        arm=arm.value,
        engine=engine,
        available=available,
        assurances=_axes(assurances),
        statement=statement(arm.value, assurances),
        detail=detail,
        egress=doctor_line(arm, engine),
        missing=[] if available else [MissingRow.of(m) for m in choice.missing],
    )


def _landlock_row(offerings: Offerings) -> ArmRow:
    """Linux's second native mechanism, shown beside bwrap whichever `native` takes."""
    choice = choose("native", offerings, mechanism="landlock")
    found = offerings.landlock_abi
    detail = f"Landlock ABI {found}" if found else "no Landlock in this kernel"
    assurances = landlock_assurances(found, own_principal=_root_caller())
    return _row("landlock", ArmName.LANDLOCK, assurances, choice, detail=detail)


def arm_rows(offerings: Offerings, configured: str = "auto", python: str = "") -> list[ArmRow]:
    """Every arm's row. `configured` is `[sandbox.container] engine`: the other engine is not
    examined then, and its row says so instead of advising to install what runs (an outsider's
    doctor said "install docker.io" beside a running docker: issue 27, item 12)."""
    rows: list[ArmRow] = []
    for engine in ENGINES:
        offer = offerings.engine(engine)
        assurances = container_assurances(
            offer.uids_namespaced if offer else False, offer.limits_enforced if offer else True
        )
        choice = choose("container", offerings, engine=engine)
        if offer is None and configured not in ("auto", engine):
            choice = Choice(
                ArmName.UNAVAILABLE,
                "container",
                (
                    Missing(
                        "not_examined",
                        f"not examined: the config names [sandbox.container] engine = "
                        f'"{configured}"',
                        f'set engine = "auto" (or "{engine}") to have doctor examine {engine}',
                    ),
                ),
            )
        detail = offer.detail if offer is not None and offer.admitted else ""
        rows.append(
            _row(
                f"container ({engine})",
                ArmName.CONTAINER,
                assurances,
                choice,
                engine=engine,
                detail=detail,
            )
        )
    native = native_arm(offerings.platform)
    choice = choose("native", offerings, mechanism="bwrap")
    if native is None:
        rows.append(_row("native", ArmName.UNAVAILABLE, ASSURANCES[ArmName.UNAVAILABLE], choice))
    else:
        detail = ""
        if native is ArmName.LINUX_NAMESPACES and offerings.bwrap:
            detail = f"{offerings.bwrap}; {offerings.user_namespace_why}"
        elif native is ArmName.MACOS_SEATBELT and offerings.sandbox_exec:
            detail = offerings.sandbox_exec
        elif native is ArmName.WINDOWS_JOB:
            detail = offerings.windows_job_why
        assurances = ASSURANCES[native]
        if native is ArmName.LINUX_NAMESPACES:
            assurances = linux_namespaces_assurances(own_principal=_root_caller())
        rows.append(_row(native.value, native, assurances, choice, detail=detail))
        if native is ArmName.LINUX_NAMESPACES:
            rows.append(_landlock_row(offerings))
    rows.append(
        _row(
            "python",
            ArmName.PYTHON,
            ASSURANCES[ArmName.PYTHON],
            choose("python", offerings),
            detail="CPython 3.12 (wasm32-wasip1) under wasmtime; runs python -c CODE or a script"
            + (f"; {python}" if python else ""),
        )
    )
    rows.append(
        _row(
            "copied_tree",
            ArmName.COPIED_TREE,
            ASSURANCES[ArmName.COPIED_TREE],
            choose("copied_tree", offerings),
        )
    )
    return rows


def resolution(
    asked: str, offerings: Offerings, engine: str, mechanism: str = "auto"
) -> Resolution:
    choice = choose(asked, offerings, engine, mechanism)
    return Resolution(
        asked=asked,
        arm=choice.arm.value,
        engine=choice.engine,
        reason=choice.reason(),
        missing=[MissingRow.of(m) for m in choice.missing],
    )


def shell_row(asked: str, shell: Shell) -> ShellRow:
    if isinstance(shell, Absent):
        return ShellRow(asked=asked, state="absent", detail="[sandbox] shell = false")
    if isinstance(shell, Found):
        return ShellRow(
            asked=asked, state="found", program=shell.program, interpreter=shell.interpreter
        )
    return ShellRow(asked=asked, state="missing", detail=shell.detail)


def cgroup_row(delegation: Delegation) -> CgroupRow:
    delegated = delegation.shares is not PlatformShares.NONE
    return CgroupRow(
        delegated=delegated,
        version=delegation.version,
        shares=delegation.shares.value,
        detail=delegation.why,
    )


def _yielding(offerings: Offerings) -> str:
    tools = [t for t in (offerings.ionice, offerings.nice, offerings.taskpolicy) if t]
    if not tools:
        return "nothing to yield with: commands run at the orchestrator's own priority"
    return "commands run one level below the orchestrator: " + ", ".join(tools)


Resolver = Callable[[bool, str, Mapping[str, str]], Shell]


def _resolve(enabled: bool, interpreter: str, environ: Mapping[str, str]) -> Shell:
    return resolve_shell(enabled, interpreter, environ)  # type: ignore[arg-type]


def _python_compiler(config: Config, environ: Mapping[str, str]) -> str:
    """Which compiler the python arm's next command runs on (native_fallbacks/wasi_tiering)."""
    from sprawl_orch.config.state import state_dir
    from sprawl_orch.native_fallbacks.wasi_tiering import describe

    try:
        return describe(state_dir(config, environ))
    except (OSError, ValueError):  # no state directory to read: nothing to say
        return ""


def doctor_report(
    offerings: Offerings,
    config: Config,
    delegation: Delegation,
    environ: Mapping[str, str],
    resolve: Resolver = _resolve,
) -> DoctorReport:
    engine = config.sandbox.container.engine
    sandbox = config.sandbox
    return DoctorReport(
        platform=offerings.platform,
        scratch=str(offerings.scratch) if offerings.scratch else None,
        scratch_problem=offerings.scratch_problem,
        yielding=_yielding(offerings),
        arms=arm_rows(offerings, engine, _python_compiler(config, environ)),
        auto=resolution("auto", offerings, engine, sandbox.native.mechanism),
        configured=resolution(sandbox.arm, offerings, engine, sandbox.native.mechanism),
        shell=shell_row(sandbox.interpreter, resolve(sandbox.shell, sandbox.interpreter, environ)),
        pwsh=shell_row("pwsh", resolve(True, "pwsh", environ)),
        cgroup=cgroup_row(delegation),
        podman_pause=pause_note(environ) if engine in ("auto", "podman") else None,
    )
