"""An exec tool's arm (design §2): the machine sampled, the arm chosen and built once, and what
its confinement says of each command.

Lazy and thread-safe (serve calls exec from many threads): nothing is sampled before the
first command asks, and sampling an engine runs probe containers, announced to the guardian
like commands.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from sprawl_orch.config import Config
from sprawl_orch.container.evidence import Evidence
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.assurances import statement
from sprawl_orch.core.credentials import passed_on_purpose
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.launch import Arm, Watcher
from sprawl_orch.runs.results import Confinement
from sprawl_orch.selection.arm_factory import build_arm, yielders_of
from sprawl_orch.selection.choice import Choice, choose
from sprawl_orch.selection.offerings import Offerings


class ToolArm:
    """`watcher`: the guardian, asked for only when an engine is sampled or an arm built."""

    def __init__(
        self,
        config: Config,
        environ: Mapping[str, str],
        evidence: Evidence,
        watcher: Callable[[], Watcher],
        lock: threading.RLock,
        offerings: Offerings | None = None,
    ) -> None:
        self.config = config
        self.environ = environ
        self.evidence = evidence
        self._watcher = watcher
        self._lock = lock
        self._offerings = offerings
        self._choice: Choice | None = None
        self._arm: Arm | None = None

    @property
    def offerings(self) -> Offerings:
        with self._lock:
            if self._offerings is None:
                asked = self.config.sandbox.arm
                engines = asked in ("auto", "container")
                # bwrap's user-namespace probe only when the arm can be native (auto steps
                # down to it only when no engine is admitted)
                native = True if asked == "native" else None if asked == "auto" else False
                self._offerings = Offerings.this_machine(
                    self.config,
                    with_engines=engines,
                    evidence=self.evidence,
                    watcher=self._watcher() if engines else None,
                    with_native=native,
                )
            return self._offerings

    @property
    def choice(self) -> Choice:
        with self._lock:
            if self._choice is None:
                self._choice = choose(
                    self.config.sandbox.arm, self.offerings, self.config.sandbox.container.engine
                )
            return self._choice

    def arm(self) -> Arm:
        with self._lock:
            if self._arm is None:
                self._arm = build_arm(
                    self.choice,
                    self.offerings,
                    self.config,
                    evidence=self.evidence,
                    watcher=self._watcher(),
                )
            return self._arm

    def for_where(self, where: str) -> Arm:
        """The chosen arm, or for `where = "host"` the host itself (no confinement)."""
        if where == "host":
            if self.config.sandbox.write_limit == "create":
                raise SprawlError(
                    ErrorCode.SANDBOX_DENIED,
                    'where = "host"',
                    '[sandbox] write_limit = "create" forbids running in the working directory',
                    'run it in the sandbox (where = "sandbox"), or change write_limit',
                )
            from sprawl_orch.native_fallbacks.host import HostArm

            return HostArm(yielders_of(self.offerings))
        return self.arm()

    def confinement(self, arm: Arm) -> Confinement:
        handed = [n for n in self.config.sandbox.credentials if n in self.environ]
        notes = [n for n in (arm.note(), passed_on_purpose(handed)) if n]
        if self.choice.missing and arm.name is not ArmName.HOST:
            steps = "; ".join(m.phrase for m in self.choice.missing)
            notes.insert(0, f"Stepped down: {steps}.")
        assurances = arm.assurances()
        return Confinement(
            arm=arm.name.value,
            statement=statement(arm.name.value, assurances, " ".join(notes) or None),
            assurances={a.value: k.value for a, k in assurances.axes().items()},
        )

    def close(self) -> None:
        if self._arm is not None:
            self._arm.close()
