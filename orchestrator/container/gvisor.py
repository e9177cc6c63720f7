"""gVisor's runsc as an OCI runtime: the wrapper podman is given by path.

runsc (Debian's 0.0~20221219) refuses to start a container whose network namespace
is the root one: "cannot run with network enabled in root network namespace" — and
every sandbox here runs `--network none`, which podman hands to the runtime as no
namespace of its own. runsc's `--network=none` (a global flag, before the subcommand)
gives the sandbox gVisor's own empty network stack instead. podman passes no global
flags of our choosing to a runtime, so the runtime it is told to use is a two-line
wrapper that execs runsc with the flag.

Why sprawl-orch writes the wrapper (into its state dir) rather than .ci/setup-engines
installing it: the product must work wherever Debian's runsc is installed, not only on
machines prepared by this repo's CI; and podman reports the runtime path it was given
as `OCIRuntime`, so the path verification compares is one sprawl-orch chose itself.
The wrapper is rewritten when its content differs (a tampered or stale one is not
trusted) and is written atomically (rename) so a concurrent command never execs half
a file.

Processes. The host's pids cgroup (`--pids-limit`) counts the sentry's and the gofer's
host threads and the ptrace platform's stub processes, not guest processes: measured on
these machines (runsc 0.0~20221219, platform ptrace, 2 CPUs) a sandbox running `sh`
holds 59 host tasks, and each further guest process ~8.5 more (10 sleeps: 144; 50: 460).
A limit of 20 stops runsc's own start; 64 lets a 200-process fork loop kill the whole
sandbox, with no EAGAIN the command could see. gVisor enforces RLIMIT_NPROC itself (a
fork past `--ulimit nproc=20` fails in the guest: "can't fork: Resource temporarily
unavailable"), so under runsc `pids` becomes the guest's nproc limit and the host cgroup
gets room for the sentry (`host_pids`): a bound on host tasks still, never the one the
command meets first. See docs/MACHINES.md "gVisor".
"""

from __future__ import annotations

from pathlib import Path

from sprawl_orch.core.host_which import host_which
from sprawl_orch.core.private import ensure_private_file

RUNSC = "runsc"
WRAPPER_NAME = "runsc-nonet"
# host tasks of a sandbox: its own (59 measured) and per guest process (~8.5 measured),
# each with about twice the room (a multi-threaded guest process costs more)
SENTRY_TASKS = 128
TASKS_PER_PROCESS = 16
# What a result under runsc says about the kernel (the statement's note, doctor).
KERNEL_NOTE = (
    "The command runs on gVisor's application kernel (runsc), not on the host's: "
    "its system calls are served by gVisor's sentry"
)


def host_pids(pids: int) -> int:
    """The host pids cgroup limit for a sandbox whose guest may hold `pids` processes."""
    return SENTRY_TASKS + TASKS_PER_PROCESS * pids


def guest_limits(
    ulimits: tuple[tuple[str, int, int], ...], pids: int
) -> tuple[tuple[str, int, int], ...]:
    """The rlimits under runsc: nproc at most `pids` (gVisor refuses the fork past it)."""
    out = {name: (soft, hard) for name, soft, hard in ulimits}
    soft, hard = out.get("nproc", (pids, pids))
    out["nproc"] = (min(soft, pids), min(hard, pids))
    return tuple((name, *out[name]) for name in sorted(out))


def runsc_path(path: str | None = None) -> str | None:
    """The installed runsc (None: not installed)."""
    return host_which(RUNSC, path)


# gVisor loads the container's OCI seccomp profile (sprawl-orch's, seccomp_profile.py) only
# with this flag; without it the profile is in the spec and nothing applies it (runsc
# 0.0~20221219: socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT) and io_uring_setup succeeded).
OCI_SECCOMP = "--oci-seccomp"
RUNTIME_ARGS: tuple[str, ...] = ("--network=none", OCI_SECCOMP)


def wrapper_text(runsc: str) -> str:
    return f'#!/bin/sh\nexec {runsc} {" ".join(RUNTIME_ARGS)} "$@"\n'


def ensure_wrapper(state: Path, runsc: str) -> Path:
    """The wrapper in `state` exec'ing `runsc` with RUNTIME_ARGS; (re)written when absent
    or different, mode 0755, by atomic rename."""
    # podman execs the wrapper as its caller (root here): a directory anyone else may
    # write would let them swap what runs as the container's runtime
    return ensure_private_file(state, WRAPPER_NAME, wrapper_text(runsc), 0o755, "a runtime wrapper")


def gvisor_note() -> str:
    """What changes for a command under runsc, each part observed on these machines
    (tests/integration/test_gvisor_arm.py). An OOM kill is not among them: docker and
    podman (the arm starts conmon in the bundle, docs/MACHINES.md) report it as under runc."""
    return (
        f"{KERNEL_NOTE} (uname and /proc are gVisor's). Processes are limited by gVisor "
        "itself (RLIMIT_NPROC: a fork past the limit fails inside the sandbox, and is not "
        "reported as pids_hit)."
    )
