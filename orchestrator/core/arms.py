"""Every arm's name and assurances, and what may be missing for one (design §1, §2).

The table here is the claim; `tests/integration/test_conformance*.py` observe
each axis with real commands and fail when a claim and an observation differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sprawl_orch.core.assurances import Assurances, Guarantee


class ArmName(StrEnum):
    CONTAINER = "container"
    LINUX_NAMESPACES = "linux_namespaces"
    LANDLOCK = "landlock"
    WINDOWS_JOB = "windows_job"
    MACOS_SEATBELT = "macos_seatbelt"
    COPIED_TREE = "copied_tree"
    PYTHON = "python"
    UNAVAILABLE = "unavailable"
    HOST = "host"


def container_assurances(uids_namespaced: bool, limits_enforced: bool = True) -> Assurances:
    """The user axis is kept only when the engine maps the command onto a subordinate
    uid range (rootless engine, podman --userns=auto, docker userns-remap): a plain
    non-root uid inside a rootful container is a uid shared with the host, not a
    principal of its own. Resources are kept unless admission's probe saw the engine
    drop the limits (rootless podman on cgroup v1)."""
    axes = [Guarantee.FILESYSTEM, Guarantee.NETWORK, Guarantee.PROCESS_TREE]
    if limits_enforced:
        axes.append(Guarantee.RESOURCES)
    if uids_namespaced:
        axes.append(Guarantee.USER)
    return Assurances.of(*axes)


def linux_namespaces_assurances(own_principal: bool) -> Assurances:
    """bwrap: --unshare-user gives a namespace, but a non-root caller's command is still
    the caller's uid on the host, so the user axis is kept only when a root caller hands
    bwrap a uid of the sandbox's own (native_fallbacks/sandbox_uid.py; design §1, §6)."""
    axes = [Guarantee.FILESYSTEM, Guarantee.NETWORK, Guarantee.PROCESS_TREE]
    if own_principal:
        axes.append(Guarantee.USER)
    return Assurances.of(*axes)


def landlock_assurances(abi: int, own_principal: bool) -> Assurances:
    """Landlock + seccomp without a namespace (native_fallbacks/landlock.py), each axis as the
    kernel's ABI allows: filesystem from ABI 3 (truncate governed), and only for a command of
    a uid of its own -- Landlock does not govern chmod/chown/utime/xattrs, so a command with
    the caller's uid changes those of the caller's files outside the copy; network from ABI 4
    (TCP rules; seccomp refuses every other protocol); process_tree from the helper and
    seccomp (one process group, a subreaper). User never: a root caller's commands all run
    as the one sandbox uid with no namespace between them, so one command can chmod or
    utime another's copy by its path and read its command line in /proc (the conformance
    row does the chmod); a non-root caller's command is the caller's uid.
    process_tree needs signal scoping (ABI 6) for a non-root caller: below it the command,
    of the caller's uid, SIGKILLs its guardian, its caller and its helper -- all that would
    kill what it left -- and a double-forked daemon lives on (test_landlock_reach.py). A
    root caller's command is the sandbox uid, which can kill neither the caller nor the
    guardian, so the group is still killed when the helper dies."""
    axes = [Guarantee.PROCESS_TREE] if abi >= 3 and (abi >= 6 or own_principal) else []
    if abi >= 3 and own_principal:
        axes.append(Guarantee.FILESYSTEM)
    if abi >= 4:
        axes.append(Guarantee.NETWORK)
    return Assurances.of(*axes)


ASSURANCES: dict[ArmName, Assurances] = {
    ArmName.CONTAINER: container_assurances(uids_namespaced=False),
    # The non-root caller's answer; BwrapArm.assurances() gives the one in force.
    ArmName.LINUX_NAMESPACES: linux_namespaces_assurances(own_principal=False),
    # The non-root caller's answer at the newest ABI; LandlockArm.assurances() gives the one
    # in force (the kernel's ABI, the caller).
    ArmName.LANDLOCK: landlock_assurances(7, own_principal=False),
    ArmName.WINDOWS_JOB: Assurances.of(*Guarantee),
    ArmName.MACOS_SEATBELT: Assurances.of(Guarantee.FILESYSTEM, Guarantee.NETWORK),
    # No namespace: the copy cannot sit at the working directory's path, so a write by that
    # path -- one recorded in the tree by an editable install, a venv, a build system --
    # lands in the person's tree. The filesystem axis is not kept (issue 11, design §5).
    ArmName.COPIED_TREE: Assurances.none(),
    # Kept by WebAssembly itself; the user axis is not: the runtime is our child, as the
    # caller (native_fallbacks/wasi_python.py).
    ArmName.PYTHON: Assurances.of(
        Guarantee.FILESYSTEM, Guarantee.NETWORK, Guarantee.PROCESS_TREE, Guarantee.RESOURCES
    ),
    ArmName.UNAVAILABLE: Assurances.none(),
    ArmName.HOST: Assurances.none(),
}


@dataclass(frozen=True)
class Missing:
    """Why an arm cannot run here, and what the person can do about it."""

    kind: str
    phrase: str
    recovery: str
    # The config key at fault (kind "config_invalid"): such a fault refuses, never steps down.
    subject: str = ""

    def text(self) -> str:
        return f"{self.phrase} ({self.recovery})"


def scratch_directory(path: str, why: str) -> Missing:
    return Missing(
        "scratch_directory",
        f"no usable scratch directory at {path}: {why}",
        "set [sandbox] scratch_dir to a writable directory",
    )


def namespace_wrapper() -> Missing:
    return Missing(
        "namespace_wrapper",
        "bubblewrap (bwrap) is not installed",
        "install it: apt-get install bubblewrap (Debian/Ubuntu), dnf install bubblewrap (Fedora)",
    )


def user_namespace(why: str) -> Missing:
    return Missing(
        "user_namespace",
        f"an unprivileged user namespace cannot be created: {why}",
        "use a host that allows them (sysctl kernel.unprivileged_userns_clone=1, or "
        "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04), or ask for "
        'where = "host"',
    )


# The lowest Landlock ABI the landlock mechanism runs on: before ABI 3, truncate() of a file
# the command may write by DAC (the person's tree, for a non-root caller) is not governed.
LANDLOCK_MIN_ABI = 3


def landlock_too_old(found: int) -> Missing | None:
    """Why this kernel's Landlock can't carry the native arm (naming the ABI found and the
    one needed), or None."""
    if found >= LANDLOCK_MIN_ABI:
        return None
    have = "no Landlock (off at boot, or a kernel before 5.13)" if found <= 0 else f"ABI {found}"
    return Missing(
        "landlock",
        f"the kernel offers {have}; the landlock mechanism needs Landlock ABI "
        f"{LANDLOCK_MIN_ABI} or later",
        "use a kernel with Landlock ABI 3 or later (Linux 6.2+, with landlock in its lsm= "
        'list), or [sandbox.native] mechanism = "bwrap" where user namespaces work',
    )


def config_invalid(subject: str, detail: str, recovery: str) -> Missing:
    """A config value this machine can't honour (e.g. more CPUs than it has): the person's
    fault to fix, so `auto` refuses rather than stepping down to an arm without limits."""
    return Missing("config_invalid", f"{subject}: {detail}", recovery, subject)


INSTALL_ENGINE = (
    "install and start one: apt-get install docker.io (then start dockerd) or "
    "apt-get install podman runc; see `sprawl-orch doctor`"
)


def container_runtime(why: str, recovery: str = "") -> Missing:
    """No engine admitted. `recovery` is the engines' own fixes (a socket to name, a group to
    join) where they answered at all; installing one is the advice only when none did."""
    return Missing(
        "container_runtime",
        f"no container engine passed admission — {why}",
        recovery or INSTALL_ENGINE,
    )


def image_not_local(engine: str, image: str | None) -> Missing:
    if image is None:
        return Missing(
            "image_not_local",
            f"no image is pinned for {engine} ([sandbox.container.images] {engine})",
            f"build and pin one: sprawl-orch image build busybox --engine {engine}",
        )
    return Missing(
        "image_not_local",
        f"the pinned image {image} is not present in {engine}",
        f"build it locally: sprawl-orch image build busybox --engine {engine}, then "
        "sprawl-orch image pin",
    )


def job_leaf(why: str) -> Missing:
    return Missing(
        "job_leaf",
        f"a Windows Job Object with an AppContainer cannot be made: {why}",
        "run on Windows 10 1809 or later (AppContainer and Job Object APIs, called through ctypes)",
    )


def seatbelt(why: str) -> Missing:
    return Missing(
        "seatbelt",
        f"macOS Seatbelt (sandbox-exec) is not usable: {why}",
        'run on macOS where /usr/bin/sandbox-exec exists, or choose arm = "copied_tree"',
    )


def python_runtime(why: str) -> Missing:
    return Missing(
        "python_runtime",
        f"the python arm's WebAssembly runtime is missing: {why}",
        "install it: pip install 'sprawl-orch[python]' (wasmtime and the pinned CPython wheel)",
    )


def not_this_platform(arm: str, platform: str) -> Missing:
    return Missing(
        "platform",
        f"the {arm} arm does not exist on {platform}",
        'choose arm = "auto" to take the best arm this machine offers',
    )
