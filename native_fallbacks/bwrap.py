"""bubblewrap (`linux_namespaces`): the copied tree inside a fresh set of namespaces (SPEC §6).

    bwrap --unshare-all --unshare-user --die-with-parent --new-session --cap-drop ALL
          --ro-bind / / --tmpfs /tmp --bind COPY COPY --dev /dev --proc /proc
          --chdir COPY -- ARGV

- `--unshare-all` alone only *tries* a user namespace (`--unshare-user-try`) and silently
  runs without one when the kernel refuses; the explicit `--unshare-user` makes that a
  failure instead, so the arm never runs with an axis missing.
- `--new-session` (setsid) stops the command from pushing keystrokes into the caller's
  terminal with TIOCSTI (CVE-2017-5226).
- Mount order matters: bwrap applies the operations in order, so a `--tmpfs /tmp` *after*
  `--bind COPY COPY` would cover the copy whenever the scratch root is under /tmp -- and it
  is by default (/tmp/sprawl-orch). The tmpfs comes first, then bwrap creates the mount
  point for the copy inside it.
- `--die-with-parent` plus the pid namespace: when the command (or the bwrap we started)
  ends, the namespace's init dies and the kernel kills every process left in it, including
  ones that called setsid() and double-forked.

The probe runs the same arguments with `/bin/true` and the working directory itself bound
read-only, before any copy is made, and is never cached: an LSM policy or a sysctl
(`kernel.apparmor_restrict_unprivileged_userns`, `user.max_user_namespaces`) can change
between two commands.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from native_fallbacks.copied_tree import CopiedTreeArm
from native_fallbacks.probe import run_probe
from orchestrator.arms import ArmName, user_namespace
from orchestrator.errors import ErrorCode, SprawlError
from orchestrator.yielding import Yielders

NAMESPACE_FLAGS: tuple[str, ...] = (
    "--unshare-all",
    "--unshare-user",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)
# bwrap 0.8 re-mounts every mount under `--ro-bind / /` read-only one by one; a mount that
# disappears meanwhile (a container starting or stopping: docker's overlay2 .../merged)
# fails the whole setup with "Can't bind mount /oldroot/ on /newroot/: Unable to apply
# mount flags: remount ...: No such file or directory" (containers/bubblewrap#650, open).
# That is a race, not a refusal: the probe tries again before it calls the arm unusable.
MOUNT_RACE = "Unable to apply mount flags: remount"
PROBE_ATTEMPTS = 3


def bwrap_argv(
    bwrap: str, copy: Path | str, argv: Sequence[str], *, writable: bool = True
) -> list[str]:
    """The wrapped command. Pure: the same inputs give the same list."""
    where = str(copy)
    bind = "--bind" if writable else "--ro-bind"
    return [
        bwrap,
        *NAMESPACE_FLAGS,
        "--ro-bind", "/", "/",
        # Before the copy's bind: see the module docstring.
        "--tmpfs", "/tmp",
        bind, where, where,
        "--dev", "/dev",
        "--proc", "/proc",
        "--chdir", where,
        "--",
        *argv,
    ]


def _true() -> str:
    # /bin/true on FHS systems; found on PATH where /bin is not populated (NixOS).
    return "/bin/true" if os.path.exists("/bin/true") else (shutil.which("true") or "/bin/true")


def probe_argv(bwrap: str, workdir: Path | str) -> list[str]:
    """The probe: the same wrapper arguments, the working directory bound read-only."""
    return bwrap_argv(bwrap, workdir, [_true()], writable=False)


def probe(bwrap: str, workdir: Path | str) -> tuple[bool, str]:
    """The probe, tried again (up to PROBE_ATTEMPTS) only when it lost the mount-table race."""
    ok, why = run_probe(probe_argv(bwrap, workdir), "bwrap")
    for _ in range(PROBE_ATTEMPTS - 1):
        if ok or MOUNT_RACE not in why:
            break
        ok, why = run_probe(probe_argv(bwrap, workdir), "bwrap")
    return ok, why


def user_namespace_works(bwrap: str) -> tuple[bool, str]:
    """Offerings' sample: can this bwrap create an unprivileged user namespace right now?"""
    ok, why = probe(bwrap, "/")
    return ok, ("an unprivileged user namespace can be created" if ok else why)


class BwrapArm(CopiedTreeArm):
    name: ArmName = ArmName.LINUX_NAMESPACES

    def __init__(self, bwrap: str, yielders: Yielders) -> None:
        super().__init__(yielders)
        self.bwrap = bwrap

    def note(self) -> str | None:
        return (
            "Reads are not restricted: the whole machine is visible read-only (/tmp is a private, "
            "empty tmpfs). The user namespace maps the command onto your own uid, so it is not "
            "a principal of its own."
        )

    def prepare(self, workdir: Path) -> None:
        # Never cached: the kernel's or the LSM's answer can change between two commands.
        ok, why = probe(self.bwrap, workdir)
        if ok:
            return
        missing = user_namespace(why)
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            subject="bwrap",
            detail="the linux_namespaces arm needs an unprivileged user namespace, and "
            f"{self.bwrap} could not make one here: {why}",
            recovery=missing.recovery,
        )

    def wrap(self, argv: Sequence[str], copy: Path) -> list[str]:
        return bwrap_argv(self.bwrap, copy, argv)
