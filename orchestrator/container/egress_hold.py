"""The container arm's allow-list (issue 24): which container paths offer it, and the proxy's
listener made inside a container before its program runs.

podman: `podman init` creates the container (runc create: namespaces made, the program not
yet exec'd); the listener is bound inside its network namespace from the pid `inspect`
reports, then `podman start` runs the program.
docker has no `init` (`docker start` runs the program at once), so the program is held: the
entrypoint is the host's static busybox, bind-mounted read-only, running
`read -r _ < GATE && exec "$@"` with the command as its arguments; GATE is a FIFO in a
read-only bind of a per-command directory, which the host opens read-write before the start
and writes a line to once the listener exists. `exec` leaves the program as pid 1 with
nothing of the hold left. EOF instead of the line (the listener failed, the host died) ends
the shell without running the program.
Proved (tests/integration/test_egress_container.py, test_rootless.py): docker (runc), docker
with userns-remap, rootful podman with runc (with and without `--userns=auto`), rootless
podman as a non-root account, and warm containers of both engines (warm_start).
gVisor: the guest's loopback is runsc's own netstack — a listener bound in the sandbox's
host-side namespace is never reached from inside (checked by the issue's author with
`nc 127.0.0.1` under runsc): refused; a bind-mounted unix socket bridge (runsc --host-uds)
would be the way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sprawl_orch.container.admitted import Admission
from sprawl_orch.core import served_memo
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress.plan import EgressPlan
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.runs.launch import Launch, Running

if TYPE_CHECKING:
    from sprawl_orch.egress.proxy import EgressProxy

PODMAN_REACH = (
    "a listener on 127.0.0.1 inside the container's network namespace, made after "
    "`podman init` and before `podman start` runs the program"
)
DOCKER_REACH = (
    "a listener on 127.0.0.1 inside the container's network namespace, made while the "
    "program is held behind a gate (the host's static busybox, bind-mounted read-only)"
)
# busybox picks its applet by argv[0]'s name ("applet not found" for any other name): the
# binary is mounted under its own name.
HOLD_SHELL = "/.sprawl-hold/busybox"
GATE_DIR = "/.sprawl-gate"
GATE_SCRIPT = f'read -r _ < {GATE_DIR}/gate && exec "$@"'


def static_busybox() -> str | None:
    """The host's busybox when it is statically linked (busybox-static): it runs in any
    image, whatever its libc. `ldd` cost ~15-35 ms of every docker call (benchmarks/
    cli_profile.py): its answer is remembered under the binary's stat (core/served_memo.py),
    so a replaced or rebuilt busybox is asked about again."""
    found = shutil.which("busybox")
    if found is None:
        return None
    path = os.path.realpath(found)
    try:
        st = os.stat(path)
    except OSError:  # gone between which and stat: no busybox to hold with
        return None
    key: list[served_memo.Json] = [
        path,
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    ]
    static = served_memo.recall("static-busybox", key)
    if not isinstance(static, bool):
        done = subprocess.run(["ldd", path], capture_output=True, text=True)
        said = done.stdout + done.stderr
        static = "not a dynamic executable" in said or "statically linked" in said
        served_memo.learn("static-busybox", key, static)
    return path if static else None


@dataclass
class Gate:
    """docker's hold: the FIFO the program waits behind, opened read-write by the host."""

    directory: Path
    fd: int
    busybox: str

    @classmethod
    def make(cls, outputs: Path, busybox: str) -> Gate:
        directory = outputs / "egress-gate"
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        fifo = directory / "gate"
        os.mkfifo(fifo, 0o644)
        os.chmod(fifo, stat.S_IFIFO | 0o644)
        # Read-write: never blocks, and the line waits in the pipe for the reader.
        return cls(directory, os.open(fifo, os.O_RDWR | os.O_CLOEXEC), busybox)

    def mounts(self) -> tuple[tuple[str, str], ...]:
        return ((self.busybox, HOLD_SHELL), (str(self.directory), GATE_DIR))

    def command(self, command: Sequence[str]) -> tuple[str, ...]:
        return ("sh", "-c", GATE_SCRIPT, "sprawl-hold", *command)

    def open(self) -> None:
        os.write(self.fd, b"g\n")

    def close(self) -> None:
        # The gate's write end: closing it twice (EBADF) is the only failure, and harmless.
        with contextlib.suppress(OSError):
            os.close(self.fd)


def egress_gap(admission: Admission, engine: str, warm: bool) -> str | None:
    """Why this container path cannot offer an allow-list, or None when it can."""
    if not admission.admitted:
        return "no engine is admitted"
    # A warm container's commands are exec'd after the listener is made: no gate to hold.
    if engine == "docker" and not warm and static_busybox() is None:
        return (
            "docker starts the program at once (it has no `init`); the hold before it needs "
            "a statically linked busybox on the host (busybox-static), and none was found"
        )
    if admission.gvisor:
        return (
            "under gVisor the command's loopback is runsc's own netstack: a listener made in "
            "the sandbox's host-side namespace is never reached (a unix socket bridge through "
            'runsc --host-uds is not built); use runtime = "runc" for this list, or the '
            "linux_namespaces arm"
        )
    return None


WARM_REACH = (
    "a listener on 127.0.0.1 inside the warm container's network namespace, made for each "
    "command before it is exec'd and closed after its processes are killed"
)


def reach(engine: str, warm: bool = False) -> str:
    if warm:
        return WARM_REACH
    return DOCKER_REACH if engine == "docker" else PODMAN_REACH


class Pool(Protocol):
    """warm.WarmPool, as warm_start uses it (warm.py imports this module)."""

    def start(
        self, launch: Launch, command: Sequence[str], ready: Callable[[int], None] | None = None
    ) -> Running: ...


def warm_start(pool: Pool, launch: Launch, command: Sequence[str]) -> Running:
    """A command in a warm container; with an allow-list, its own proxy and a listener made
    in the container's namespace before the command is exec'd. The container's earlier
    commands' processes were killed before it was idle again, and this command's are killed
    before its listener closes (ProxiedRunning.finish: the run first): none reaches a
    proxy not its own."""
    plan = launch.egress
    if plan is None:
        return pool.start(launch, command)
    if plan.secrets is not None:
        # Issue 25's CA bundle is made per command (secrets/plan.py, in its outputs); a warm
        # container's binds were fixed when it was created, before this command.
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            "[sandbox.secrets] in a warm container",
            "each command's interception CA bundle is made with the command, and a warm "
            "container's read-only mounts were fixed when it was created, before it",
            "set [sandbox.container] warm = false for commands that use secrets",
        )
    made: list[EgressProxy] = []

    def ready(pid: int) -> None:
        made.append(proxy_at(plan, pid))

    try:
        run = pool.start(launch, command, ready)
    except BaseException:
        for proxy in made:
            proxy.close()
        raise
    from sprawl_orch.runs.proxied import ProxiedRunning

    return ProxiedRunning(run, made[0])


def refuse_if(gap: str | None) -> None:
    if gap is not None:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            "[sandbox.network] allow",
            f"not offered on this container arm: {gap}",
            "remove [sandbox.network] allow, or use an arm that offers it (sprawl-orch doctor)",
        )


def proxy_at(plan: EgressPlan, pid: int) -> EgressProxy:
    from sprawl_orch.runs.proxied import proxy_for

    return proxy_for(plan, pid)


def init_pid(engine: ContainerEngine, container: str) -> int:
    """podman: the pid of the initialised container (namespaces made, program not run)."""
    init = getattr(engine, "init_pid", None)
    if init is None:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            "[sandbox.network] allow",
            f"{engine.name} has no init",
            "use podman",
        )
    return int(init(container))


@dataclass
class Held:
    """What a container command with an allow-list adds to its create: read-only binds (the
    gate, the host's CA bundle with trust = "host"), the hold's entrypoint and command."""

    plan: EgressPlan | None = None
    gate: Gate | None = None
    read_only: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, launch: Launch, engine: str, gap: str | None) -> Held:
        plan = launch.egress
        if plan is None:
            return cls()
        refuse_if(gap)
        read_only = plan.bundle_binds()
        gate = None
        if engine == "docker":
            busybox = static_busybox()
            if busybox is None:
                # egress_gap skips this for warm = true, whose -i/-t commands still run cold
                refuse_if(
                    "docker starts the program at once (it has no `init`); the hold before it "
                    "needs a statically linked busybox on the host (busybox-static), and none "
                    "was found"
                )
            assert busybox is not None
            gate = Gate.make(launch.outputs, busybox)
            read_only += gate.mounts()
        return cls(plan, gate, read_only)

    @property
    def entrypoint(self) -> str | None:
        return HOLD_SHELL if self.gate is not None else None

    def command(self, command: Sequence[str]) -> tuple[str, ...]:
        return tuple(command) if self.gate is None else self.gate.command(command)

    def close(self, proxy: EgressProxy | None = None) -> None:
        if self.gate is not None:
            self.gate.close()
        if proxy is not None:
            proxy.close()
