"""The engine's words for a failed connect or probe, turned into (reason, recovery).

Each case was met on these machines (docs/MACHINES.md): crun on a hybrid cgroup host,
rlimits above the host's hard limit, a daemon that is not running, a socket this user
may not use. Anything else keeps the engine's words and points at doctor.
"""

from __future__ import annotations

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits
from sprawl_orch.container.endpoint_words import denied, no_socket
from sprawl_orch.engines.engine import daemon_refused, socket_denied

# runsc 0.0~20221219 under podman 4.3 --userns=auto or docker 20.10 userns-remap: the same
# run passes with the copy's parent at 0755 and fails with it at 0700 (runc passes either way)
_GOFER = (
    "runsc's gofer opens the copy's mount as the namespace's root, which may not pass "
    "the private (0700) directories above the copy"
)


def explain(
    engine: str, runtime: str, words: str, config: ContainerConfig, host: HostLimits | None = None
) -> tuple[str, str]:
    """(reason, recovery) for a failed probe or connect, from the engine's own words."""
    low = words.lower()
    if "hybrid mode not supported" in low:
        return (
            f"the {runtime} runtime cannot run containers on this host's hybrid cgroup "
            f"layout (v1 controllers + a v2 mount): {words}",
            f"install runc (apt-get install runc) so admission can fall back to it, or set "
            f'runtime = "runc" in containers.conf ({engine})',
        )
    if "setrlimit" in low or "error setting rlimit" in low:
        hard = host.rlimits_hard if host else {}
        asked = ", ".join(f"{k}={v}" for k, v in sorted(config.ulimits.items()))
        limits = ", ".join(f"{k} {hard.get(k)}" for k in sorted(config.ulimits))
        return (
            f"the runtime may not set the asked rlimits ({asked}) above the engine's hard "
            f"limits: {words}",
            f"lower [sandbox.container] ulimits to at most the hard limits ({limits} here), "
            f"or raise the hard limits of the {engine} engine's service",
        )
    if "cannot read client sync file" in low:
        return (
            f"runsc cannot start its sandbox under {engine}'s user namespace here: {_GOFER} "
            f"({words})",
            f'use a {engine} without a user namespace for runsc (podman: userns = "off"; '
            'docker: the plain daemon), or runtime = "auto" to keep the user namespace '
            "under the default runtime",
        )
    if socket_denied(words):
        return denied(engine, words, config)
    if daemon_refused(words):
        return no_socket(engine, words, config)
    return (
        f"{engine} failed the probe container: {words}",
        f"see `{engine} info` and `sprawl-orch doctor`",
    )


def userns_failure(flag: str, words: str, gvisor: bool) -> str:
    """Why podman's user namespace was dropped, in the terms of what failed."""
    if gvisor and "cannot read client sync file" in words:
        return f"podman --userns={flag} fails under runsc here: {_GOFER} ({words})"
    return f"podman --userns={flag} failed the probe: {words}"


def runsc_failure(words: str, userns: bool) -> str:
    """Why `runtime = "auto"` did not take runsc."""
    if userns and "cannot read client sync file" in words:
        return (
            f"runsc not used: it fails under the engine's user namespace here ({_GOFER}); "
            f"the user namespace was kept with the engine's default runtime ({words})"
        )
    return f"runsc not used: it failed the probe ({words})"
