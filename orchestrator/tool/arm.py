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
from sprawl_orch.core.arms import ArmName, Missing
from sprawl_orch.core.assurances import Kept, statement
from sprawl_orch.core.credentials import passed_on_purpose
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress.offer import arm_egress_gap, egress_reach
from sprawl_orch.egress.plan import EgressPlan, plan_of
from sprawl_orch.runs.launch import Arm, Watcher
from sprawl_orch.runs.results import Confinement
from sprawl_orch.secrets.plan import specs_of, statement_phrase
from sprawl_orch.selection.arm_factory import build_arm, yielders_of
from sprawl_orch.selection.choice import Choice, below_container, choose
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
        net = config.sandbox.network
        self.egress_plan = plan_of(net.allow, net.deny, net.trust, environ)
        # Issue 25: the values read once, here (a missing one refuses the tool at its start).
        self.secrets = specs_of(config.sandbox, environ) if config.sandbox.secrets else ()

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
                    with_python=asked == "python",  # no other arm, auto included, reads it
                )
            return self._offerings

    @property
    def choice(self) -> Choice:
        with self._lock:
            if self._choice is None:
                self._choice = choose(
                    self.config.sandbox.arm,
                    self.offerings,
                    self.config.sandbox.container.engine,
                    self.config.sandbox.native.mechanism,
                )
            return self._choice

    def arm(self) -> Arm:
        with self._lock:
            if self._arm is None:
                arm = self._build(self.choice, self.offerings)
                if self._steps_past(arm):
                    arm = self._below(arm)
                self._arm = arm
            return self._arm

    def _build(self, choice: Choice, offerings: Offerings) -> Arm:
        return build_arm(
            choice,
            offerings,
            self.config,
            evidence=self.evidence,
            watcher=self._watcher(),
            environ=self.environ,
        )

    def _steps_past(self, arm: Arm) -> bool:
        """`auto` with an allow-list on a container that cannot carry it (gVisor, a warm
        container, docker without a static busybox, ...): the issue asks for a stated step
        down, not the refusal an explicitly named arm gets."""
        return (
            self.egress_plan is not None
            and self.config.sandbox.arm == "auto"
            and arm.name is ArmName.CONTAINER
            and egress_reach(arm) is None
        )

    def _below(self, container: Arm) -> Arm:
        engine = getattr(getattr(container, "engine", None), "name", None)
        which = f"the container arm ({engine})" if engine else "the container arm"
        past = Missing(
            "egress_allow_list",
            f"{which} cannot carry [sandbox.network] allow: {arm_egress_gap(container)}",
            'name the arm (arm = "container") to be refused instead of stepping down, or '
            "remove [sandbox.network] allow",
        )
        container.close()
        offerings = self.offerings
        if offerings.user_namespace is None:
            # auto skipped bwrap's probe because an engine was admitted: probe it now.
            offerings = Offerings.this_machine(self.config, with_engines=False, with_native=True)
        self._choice = below_container(self.choice, offerings, past)
        return self._build(self._choice, offerings)

    def for_where(self, where: str) -> Arm:
        """The chosen arm, or for `where = "host"` the host itself (no confinement)."""
        if where == "host":
            if self.config.sandbox.arm == "python":
                raise SprawlError(
                    ErrorCode.SANDBOX_DENIED,
                    'where = "host"',
                    "the python arm has no host form: a host interpreter is the program arm's "
                    "(design §2)",
                    'drop where = "host" to run it in the WebAssembly guest, or set [sandbox] '
                    'arm = "auto" and run python on the host by name',
                )
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

    def egress_for(self, arm: Arm) -> EgressPlan | None:
        """The allow-list plan for a command on `arm`; E_SANDBOX_DENIED when the arm cannot
        offer one (its command would have no way to the proxy, or no namespace to keep it
        from going around it). `where = "host"` has the host's whole network anyway."""
        plan = self.egress_plan
        if plan is None or arm.name is ArmName.HOST:
            return None
        if egress_reach(arm) is None:
            stepped = (
                f"; auto {self.choice.reason().partition(' ')[2]}" if self.choice.missing else ""
            )
            raise SprawlError(
                ErrorCode.SANDBOX_DENIED,
                "[sandbox.network] allow",
                f"the {arm.name.value} arm does not offer an allow-list "
                f"({arm_egress_gap(arm)}){stepped}; an allow-list is offered on "
                "linux_namespaces (bwrap) and the container arm (sprawl-orch doctor says "
                "which engines and runtimes)",
                "remove [sandbox.network] allow (no network), or choose an arm that offers it "
                "(sprawl-orch doctor lists them)",
            )
        return plan

    def image_trust(self, arm: Arm) -> bytes | None:
        """What a command's secrets bundle starts from when it is not the host's: the image's
        own CAs, for a container arm with trust = "image" (issue 25: the bundle replaces the
        command's trust store, so what its image trusted must be in it). None: the host's."""
        if self.config.sandbox.network.trust != "image":
            return None
        read = getattr(arm, "image_trust_store", None)
        return read() if callable(read) else None

    def confinement(self, arm: Arm) -> Confinement:
        handed = [n for n in self.config.sandbox.credentials if n in self.environ]
        notes = [n for n in (arm.note(), passed_on_purpose(handed)) if n]
        if self.choice.missing and arm.name is not ArmName.HOST:
            steps = "; ".join(m.phrase for m in self.choice.missing)
            notes.insert(0, f"Stepped down: {steps}.")
        assurances = arm.assurances()
        plan = self.egress_for(arm)
        if plan is not None:
            # The command can send data to the listed hosts: the axis is not kept.
            assurances = assurances.model_copy(update={"network": Kept.NO})
            notes.insert(0, plan.trust_note() or "")
            notes.insert(0, statement_phrase(self.secrets) or "")
        return Confinement(
            arm=arm.name.value,
            statement=statement(
                arm.name.value,
                assurances,
                " ".join(n for n in notes if n) or None,
                network=plan.phrase() if plan is not None else None,
            ),
            assurances={a.value: k.value for a, k in assurances.axes().items()},
        )

    def close(self) -> None:
        if self._arm is not None:
            self._arm.close()
