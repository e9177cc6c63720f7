"""Which arms offer an allow-list and how their command reaches the proxy (doctor's column,
the refusal's words). An arm offers it by an `egress_reach` attribute saying how."""

from __future__ import annotations

from sprawl_orch.arms import ArmName

# Why an arm without `egress_reach` cannot offer one (yet), by arm.
GAPS: dict[ArmName, str] = {
    ArmName.COPIED_TREE: "the copied tree has no network namespace: nothing keeps a command "
    "from going around a proxy",
    ArmName.HOST: "where = host has the host's whole network",
}


def arm_egress_gap(arm: object) -> str:
    gap = getattr(arm, "egress_gap", None)
    if isinstance(gap, str) and gap:
        return gap
    name = getattr(arm, "name", None)
    if isinstance(name, ArmName) and name in GAPS:
        return GAPS[name]
    return "it has no network namespace of its own to keep a command from going around a proxy"


def egress_reach(arm: object) -> str | None:
    reach = getattr(arm, "egress_reach", None)
    return reach if isinstance(reach, str) and reach else None
