"""The container arm's allow-list (issue 24): which container paths offer it, and the proxy's
listener made inside a container that exists but has not started its program.

podman: `podman init` creates the container (runc create: namespaces made, the program not
yet exec'd); the listener is bound inside its network namespace from the pid `inspect`
reports, then `podman start` runs the program. Proved on rootful podman with runc, with and
without `--userns=auto` (tests/integration/test_egress_container.py).
docker has no `init`: `docker start` runs the program at once; a hold before the program (a
bind-mounted static shell waiting on a gate) is the way, not built yet: refused.
gVisor: the guest's loopback is runsc's own netstack — a listener bound in the sandbox's
host-side namespace is never reached from inside (checked by the issue's author with
`nc 127.0.0.1` under runsc): refused; a bind-mounted unix socket bridge (runsc --host-uds)
would be the way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sprawl_orch.container.admission import Admission
from sprawl_orch.container.engine import ContainerEngine
from sprawl_orch.egress.plan import EgressPlan
from sprawl_orch.errors import ErrorCode, SprawlError

if TYPE_CHECKING:
    from sprawl_orch.egress.proxy import EgressProxy

PODMAN_REACH = (
    "a listener on 127.0.0.1 inside the container's network namespace, made after "
    "`podman init` and before `podman start` runs the program"
)


def egress_gap(admission: Admission, engine: str, warm: bool) -> str | None:
    """Why this container path cannot offer an allow-list, or None when it can."""
    if not admission.admitted:
        return "no engine is admitted"
    if engine != "podman":
        return (
            "docker starts the program at once (it has no `init`): the hold before the "
            "program it needs is not built yet; podman offers it"
        )
    if admission.gvisor:
        return (
            "under gVisor the command's loopback is runsc's own netstack: a listener made in "
            "the sandbox's host-side namespace is never reached (a unix socket bridge is not "
            "built)"
        )
    if warm:
        return "a warm container starts once, before any command: not wired yet"
    if admission.userns is not None and admission.userns.mode == "rootless":
        return "rootless podman (joining its user namespace first) is not proved yet"
    return None


def proxy_in_container(
    engine: ContainerEngine, container: str, plan: EgressPlan, gap: str | None
) -> EgressProxy:
    from sprawl_orch.egress.running import proxy_for

    init_pid = getattr(engine, "init_pid", None)
    if init_pid is None or gap is not None:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            "[sandbox.network] allow",
            f"not offered on this container arm: {gap or 'the engine has no init'}",
            "remove [sandbox.network] allow, or use an arm that offers it (sprawl-orch doctor)",
        )
    return proxy_for(plan, int(init_pid(container)))
