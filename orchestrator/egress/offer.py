"""Which arms offer an allow-list and how their command reaches the proxy (doctor's column,
the refusal's words). An arm offers it by an `egress_reach` attribute saying how."""

from __future__ import annotations

from sprawl_orch.core.arms import ArmName

# Why an arm without `egress_reach` cannot offer one (yet), by arm.
GAPS: dict[ArmName, str] = {
    ArmName.COPIED_TREE: "the copied tree has no network namespace: nothing keeps a command "
    "from going around a proxy",
    ArmName.HOST: "where = host has the host's whole network",
    ArmName.LANDLOCK: "Landlock refuses every TCP connect and seccomp every other protocol; "
    "no network namespace holds a listener for the proxy, and a port rule would open that "
    "port on every host address",
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


def doctor_line(arm: ArmName, engine: str | None = None) -> str:
    """doctor's answer per arm: whether `[sandbox.network] allow` is offered, and how the
    command reaches the proxy (or why not)."""
    if arm is ArmName.LINUX_NAMESPACES:
        return (
            "allow-lists offered: a listener on 127.0.0.1:3128 inside the command's network "
            "namespace (bwrap held on --block-fd until it exists)"
        )
    if arm is ArmName.CONTAINER and engine == "podman":
        return (
            "allow-lists offered with runc (rootful, --userns=auto, rootless, warm): a "
            "listener on 127.0.0.1:3128 made after `podman init` (warm: before each exec); "
            "not under gVisor (auto steps past it to linux_namespaces)"
        )
    if arm is ArmName.CONTAINER:
        return (
            "allow-lists offered with runc (plain, userns-remap, warm): the program held "
            "behind a gate (the host's static busybox, busybox-static) until a listener on "
            "127.0.0.1:3128 exists (warm: made before each exec); not under gVisor (auto "
            "steps past it to linux_namespaces)"
        )
    return f"allow-lists not offered: {GAPS.get(arm, 'no network namespace of its own')}"
