"""Choosing the arm: a pure function of the config's spelling and the machine (design §2).

`auto` is container-first and says every step down; a name written explicitly
whose mechanism is missing gives `unavailable` with what is missing — never a
silently weaker arm.
"""

from __future__ import annotations

from dataclasses import dataclass

from sprawl_orch.core import arms
from sprawl_orch.core.arms import ArmName, Missing
from sprawl_orch.core.engine_offer import EngineOffer
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.selection.offerings import Offerings


@dataclass(frozen=True)
class Choice:
    arm: ArmName
    asked: str
    # What `auto` stepped past, in order, or why an explicit arm is unavailable.
    missing: tuple[Missing, ...] = ()
    engine: str | None = None

    def reason(self, *, recovery: bool = True) -> str:
        """Why this arm. `recovery=False` leaves each step's fix out, for a refusal that
        carries the fixes in its own field (the CLI, serve and MCP print both: an outsider saw
        every fix twice, issue 27 item 7)."""
        if self.arm is ArmName.UNAVAILABLE:
            said = (m.text() if recovery else m.phrase for m in self.missing)
            return f"{self.asked} is unavailable: " + "; ".join(said)
        if not self.missing:
            return f"{self.asked} resolves to {self.arm.value}" + (
                f" ({self.engine})" if self.engine else ""
            )
        steps = "; ".join(m.phrase for m in self.missing)
        return f"{self.asked} resolves to {self.arm.value} because {steps}"


def _native_name(platform: str) -> ArmName | None:
    if platform.startswith("linux"):
        return ArmName.LINUX_NAMESPACES
    if platform == "darwin":
        return ArmName.MACOS_SEATBELT
    if platform == "win32":
        return ArmName.WINDOWS_JOB
    return None


def _container(offerings: Offerings, engine: str) -> tuple[EngineOffer | None, list[Missing]]:
    names = ENGINES if engine == "auto" else (engine,)
    refusals: list[str] = []
    admitted = [o for o in map(offerings.engine, names) if o is not None and o.admitted]
    # an engine that keeps the user axis first (admission ran on past a plain one)
    keeps_user = next((o for o in admitted if o.uids_namespaced), None)
    if keeps_user is not None or admitted:
        chosen = keeps_user or admitted[0]
        return chosen, _passed_over(offerings, names, chosen)
    for name in names:
        offer = offerings.engine(name)
        if offer is None:
            refusals.append(f"{name}: not examined")
            continue
        refusals.append(f"{name}: {offer.detail}")
    offers = [o for o in map(offerings.engine, names) if o is not None]
    # A config value no engine can honour is the person's to fix: only it is named.
    faults = list(dict.fromkeys(o.config_fault for o in offers if o.config_fault is not None))
    if faults:
        return None, faults
    # Every engine's fault is named: an engine that works but lacks the pinned image by
    # its recovery (build the image), the others by their own words.
    image_faults = [o.image_missing for o in offers if o.image_missing is not None]
    others = [
        r
        for r in refusals
        if not any(r.startswith(f"{o.engine}: ") and o.image_missing is not None for o in offers)
    ]
    if others:
        # Each engine that answered says its own fix (a socket to point at, a group to join);
        # one not installed at all has nothing to say, and installing is the advice only then.
        fixes = [
            f"{o.engine}: {o.recovery}"
            for o in offers
            if o.recovery and not o.admitted and o.image_missing is None
        ]
        image_faults.append(arms.container_runtime("; ".join(others), "; ".join(fixes)))
    return None, image_faults


def _passed_over(
    offerings: Offerings, names: tuple[str, ...], chosen: EngineOffer
) -> list[Missing]:
    """The engines tried before `chosen`, each with why it was not taken: an outsider saw
    podman run with docker dead and nothing saying why not docker (issue 27, item 9)."""
    passed: list[Missing] = []
    for name in names[: names.index(chosen.engine)] if chosen.engine in names else ():
        offer = offerings.engine(name)
        if offer is None:
            continue  # not asked: an earlier engine was taken (auto stops at the first)
        why = (
            f"it does not keep the user axis here and {chosen.engine} does"
            if offer.admitted
            else offer.detail
        )
        passed.append(
            Missing(
                "engine_passed", f"{name} passed over for {chosen.engine}: {why}", offer.recovery
            )
        )
    return passed


def _bwrap(offerings: Offerings) -> list[Missing]:
    if offerings.bwrap is None:
        return [arms.namespace_wrapper()]
    if offerings.user_namespace is False:
        return [arms.user_namespace(offerings.user_namespace_why)]
    return []


def _linux(offerings: Offerings, mechanism: str) -> tuple[ArmName | None, list[Missing]]:
    """bwrap where a user namespace can be made, else Landlock where the ABI carries it
    (`mechanism` "auto"); a named mechanism: that one or nothing. With a found arm the list
    says what was stepped past (bwrap's refusal, when Landlock was taken)."""
    said = [] if mechanism == "landlock" else _bwrap(offerings)
    if mechanism != "landlock" and not said:
        return ArmName.LINUX_NAMESPACES, []
    if mechanism == "bwrap":
        return None, said
    too_old = arms.landlock_too_old(offerings.landlock_abi)
    if too_old is None:
        return ArmName.LANDLOCK, said
    return None, [*said, too_old]


def _native(offerings: Offerings, mechanism: str = "auto") -> tuple[ArmName | None, list[Missing]]:
    name = _native_name(offerings.platform)
    if name is ArmName.LINUX_NAMESPACES:
        return _linux(offerings, mechanism)
    if name is ArmName.MACOS_SEATBELT:
        if offerings.sandbox_exec is None:
            return None, [arms.seatbelt("sandbox-exec not found")]
        return name, []
    if name is ArmName.WINDOWS_JOB:
        if not offerings.windows_job:
            return None, [arms.job_leaf(offerings.windows_job_why)]
        return name, []
    return None, [arms.not_this_platform("native", offerings.platform)]


def choose(
    name: str, offerings: Offerings, engine: str = "auto", mechanism: str = "auto"
) -> Choice:
    """`mechanism`: `[sandbox.native] mechanism` (Linux: auto | bwrap | landlock)."""
    if offerings.scratch is None and name != "none":
        why = offerings.scratch_problem or "unknown"
        return Choice(ArmName.UNAVAILABLE, name, (arms.scratch_directory("scratch", why),))
    if name == "container":
        offer, missing = _container(offerings, engine)
        if offer is None:
            return Choice(ArmName.UNAVAILABLE, name, tuple(missing))
        return Choice(ArmName.CONTAINER, name, tuple(missing), engine=offer.engine)
    if name == "native":
        native, missing = _native(offerings, mechanism)
        if native is None:
            return Choice(ArmName.UNAVAILABLE, name, tuple(missing))
        return Choice(native, name, tuple(missing))
    if name == "copied_tree":
        return Choice(ArmName.COPIED_TREE, name)
    if name == "none":
        return Choice(
            ArmName.UNAVAILABLE,
            name,
            (
                Missing(
                    "disabled",
                    '[sandbox] arm = "none" turns sandboxed commands off',
                    'set [sandbox] arm = "auto", or ask for where = "host" by name',
                ),
            ),
        )
    if name == "python":
        if offerings.python_missing is not None:
            runtime = arms.python_runtime(offerings.python_missing)
            return Choice(ArmName.UNAVAILABLE, name, (runtime,))
        return Choice(ArmName.PYTHON, name)
    if name != "auto":
        raise ValueError(f"unknown arm spelling {name!r}; config parsing should have refused it")
    said: list[Missing] = []
    offer, missing = _container(offerings, engine)
    if offer is not None:
        return Choice(ArmName.CONTAINER, name, tuple(missing), engine=offer.engine)
    if any(m.kind == "config_invalid" for m in missing):
        # Never a silent step-down to an arm without limits because a limit was mistyped.
        return Choice(ArmName.UNAVAILABLE, name, tuple(missing))
    said += missing
    native, missing = _native(offerings, mechanism)
    if native is not None:
        return Choice(native, name, tuple(said + missing))
    said += missing
    return Choice(ArmName.COPIED_TREE, name, tuple(said))


def below_container(choice: Choice, offerings: Offerings, past: Missing) -> Choice:
    """`auto`'s next arm when the container it chose cannot carry what the config asks
    (`past` says what and why): native, else unavailable with every reason. The copied
    tree is not a step here: it carries no allow-list either (no network namespace)."""
    said = (*choice.missing, past)
    native, missing = _native(offerings)
    if native is not None:
        return Choice(native, choice.asked, said)
    return Choice(ArmName.UNAVAILABLE, choice.asked, (*said, *missing))
