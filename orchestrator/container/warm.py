"""Warm mode (`[sandbox.container] warm = true`): one kept container per exec tool, run and
copy, created, inspected and verified once, idle under a minimal init; each command enters
it with an exec (warm_exec.py). What a fresh container guaranteed by being new is made true
again around every command, from the host (warm_host.py):

- before: the copy was resynced by the exec tool, as for every command; the container is
  checked alive, its init unchanged, and re-inspected against what was asked (verify.py).
- the command runs as the configured user; the idle init runs as the container's root
  (uid 0 with every capability dropped), so a command can neither signal nor trace it —
  with the same uid it could ptrace the init and leave code behind for the next command.
- after (or when its window passes and it is halted or released): every process it started
  is SIGKILLed with the container's cgroup frozen (warm_freeze.py: a forking process cannot
  outrun it) — found by the container's cgroup and pid namespace, so setsid/double-forked
  ones too — and the container takes another command only when its init alone is left;
  what it added to /tmp, /dev/shm, /dev/mqueue and every other rw tmpfs is deleted; SysV
  IPC removed; the memory cgroup's OOM-kill count tells whether the OOM killer struck
  during this command.
- a container that died, whose init or writable baseline changed, or whose processes could
  not all be killed is removed and replaced; the result says why ("replaced").
- a command still running when its window passes keeps its container (it is busy); the
  next command gets another one. Idle containers past IDLE are removed, oldest first.
The guardian hears of each warm container as of any other (expect / created / gone).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

from sprawl_orch.container.argv import fit_limits
from sprawl_orch.container.command import command_env, command_venv, remove_quietly
from sprawl_orch.container.ownership import given_away
from sprawl_orch.container.userns import Userns
from sprawl_orch.container.verify import Expected, as_command_user, verify
from sprawl_orch.container.warm_exec import Asked, create_exec
from sprawl_orch.container.warm_host import HostView
from sprawl_orch.container.warm_program import cannot_run
from sprawl_orch.container.warm_run import Warm, WarmArm, WarmRun
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.unrunnable import runtime_refusal
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.runs.launch import Launch

INIT_USER = "0:0"
# The idle init: a shell that reaps whatever is reparented to it (orphans of commands, until
# they are killed) and sleeps; busybox and every distro image have both.
INIT = ("/bin/sh", "-c", 'trap "exit 0" TERM; while :; do sleep 2147483647 & wait; done')
IDLE = 4
WARM_NOTE = (
    "Warm container: each command is an exec into a kept, verified container; between "
    "commands every process a command started is killed with the container's cgroup "
    "frozen (found by that cgroup and the pid namespace; the next command starts only when "
    "the init alone is left), its files in /tmp, /dev/shm and the other writable mounts and its "
    "SysV IPC objects are removed, and the copy is resynced; a container that died or was "
    "changed is replaced."
)


def rootless_refusal(userns: Userns | None) -> SprawlError | None:
    """Warm mode makes a fresh container's guarantees true again from the host: it kills
    the command's processes, empties the writable mounts and the SysV IPC, and re-owns
    the copy. A rootless caller may do none of that from outside podman's user
    namespace (measured as sprawl-rootless on podman 4.3.1: kill of the command's
    subordinate uid -> EPERM, lchown of the copy -> EPERM), so it is refused, not run
    with guarantees that would not hold."""
    if not given_away(userns):
        return None
    assert userns is not None
    return SprawlError(
        ErrorCode.SANDBOX_DENIED,
        "warm mode",
        f"warm = true with {userns.why}; between commands warm mode kills what a command "
        "left, empties the container's writable mounts and SysV IPC and re-owns the copy "
        f"from the host, and this process (uid {os.geteuid()}) may not touch the command's "
        "subordinate uids from outside podman's user namespace (kill: EPERM), so a fresh "
        "container's guarantees would not hold",
        "set [sandbox.container] warm = false (a fresh container per command), or run "
        "sprawl-orch as root with rootful podman",
    )


class WarmPool:
    def __init__(self, arm: WarmArm) -> None:
        self.arm = arm
        self._idle: list[Warm] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- taking a container -----------------------------------------------------------------
    def start(
        self, launch: Launch, command: Sequence[str], ready: Callable[[int], None] | None = None
    ) -> WarmRun:
        """`ready(init_pid)`: called once the container is taken, before the command enters
        it (an allow-list's listener is made there: egress_hold.warm_start)."""
        refused = rootless_refusal(self.arm.admission().userns)
        if refused is not None:
            raise refused
        replaced: str | None = None
        made: Asked | None = None
        warm = self._take(launch)
        if warm is not None:
            made = self._create_ahead(warm, launch, command)
            replaced = self._still_good(warm)
            if replaced is not None:
                if made is not None:
                    made.join()  # never started: it goes with the container
                made = None
                self.remove(warm)
                warm = None
        if warm is None:
            warm = self._make(launch)
        words = _cannot_run(warm, command)
        if words is not None:
            self.release(warm)  # nothing ran in it (no exec was made for it: _create_ahead)
            refusal = runtime_refusal(words, command[0], command_venv(launch, command))
            assert refusal is not None
            raise refusal
        if ready is not None:
            try:
                ready(warm.host.init)
            except BaseException:
                if made is not None:
                    made.join()  # created, never started: nothing ran in it
                self.release(warm)  # nothing ran in it
                raise
        return WarmRun(self, warm, launch, command, replaced, made)

    def _create_ahead(self, warm: Warm, launch: Launch, command: Sequence[str]) -> Asked | None:
        """docker: the exec the command will enter by, created while the checks before reuse
        run (one round trip to the daemon less on the path, issue 26). Creating an exec runs
        nothing: it is started only after every check passed (warm_run.WarmRun), and one
        whose container fails them goes with the container. None for podman (its exec is
        one CLI run) and for a program that can't run (refused, with no exec left behind)."""
        engine = self.arm.engine
        if not isinstance(engine, DockerEngine):
            return None
        words = _cannot_run(warm, command)
        if words is not None:
            return None
        user = fit_limits(self.arm.config, self.arm.host).user
        env = command_env(launch)
        try:
            engine.api()  # made here: the two threads then share one client, never build two
        except SprawlError:  # the daemon is not reached: the checks before reuse say so
            return None

        def create(container: str) -> str:
            return create_exec(engine, container, command, env, user, warm.workdir)

        return Asked(create, warm.container)

    def _take(self, launch: Launch) -> Warm | None:
        """An idle container of this copy and run, now ours (checked by the caller)."""
        copy = launch.cwd.resolve()
        with self._lock:
            warm = next((w for w in self._idle if w.copy == copy and w.run == launch.run), None)
            if warm is not None:
                self._idle.remove(warm)
        return warm

    def _make(self, launch: Launch) -> Warm:
        engine = self.arm.engine
        container, name, record = self.arm.create_verified(
            launch,
            INIT,
            init_user=INIT_USER,
            read_only=launch.egress.bundle_binds() if launch.egress else (),
        )
        try:
            # the init's output is nothing; podman's `start --attach` runs on in a thread
            engine.start(container, launch.outputs / "init-out", launch.outputs / "init-err")
            deadline = time.monotonic() + 10.0
            state = engine.inspect(container).get("State") or {}
            while state.get("Status") == "created" and time.monotonic() < deadline:
                time.sleep(0.01)
                state = engine.inspect(container).get("State") or {}
            pid = int(state.get("Pid") or 0)
            if not state.get("Running") or pid <= 0:
                raise SprawlError(
                    ErrorCode.ENGINE_REFUSED,
                    "warm container",
                    f"its init did not stay up: {state.get('Error') or state}",
                    "check that the image has /bin/sh and sleep",
                )
            workdir = str((engine.inspect(container).get("Config") or {}).get("WorkingDir"))
            deadline = time.monotonic() + 2.0
            host = HostView.of(pid, workdir)
            while len(host.baseline) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)  # the init's sleep not forked yet
                host = HostView.of(pid, workdir)
        except BaseException:
            self.arm.left_copy(launch.cwd.resolve())
            remove_quietly(engine, container, launch, name)
            raise
        record = {**record, "warm": True, "init_user": INIT_USER}
        uid, _, gid = str(record["host_owner"]).partition(":")
        warm = Warm(
            container,
            name,
            launch.cwd.resolve(),
            launch.run,
            workdir,
            launch.watcher,
            host,
            record,
            (int(uid), int(gid)),
        )
        warm.source = launch.workdir
        return warm

    def _still_good(self, warm: Warm) -> str | None:
        """None when the idle container may take the next command, else why it is replaced."""
        # The engine's inspect is asked first and read last: its round trip to the daemon
        # (4-10 ms of a served warm call, 2026-12-03) runs while the host's own checks below
        # walk /proc. Every check still comes before the command enters the container.
        asked = Asked(self.arm.engine.inspect, warm.container)
        if not warm.host.baseline_intact():
            asked.join()
            return "its init is gone or was replaced"
        left = warm.host.strays()
        if left:
            asked.join()
            return f"it holds processes besides its init (host pids {sorted(left)[:5]})"
        try:
            inspect = asked.result()  # the engine is this thread's again from here
            if not (inspect.get("State") or {}).get("Running"):
                return "it is no longer running"
            admission = self.arm.admission()
            assert admission.image is not None and admission.runtime_used is not None
            expected = Expected.of(
                self.arm.engine.name,
                self.arm.config,
                self.arm.host,
                admission.image,
                warm.copy,
                admission.runtime_used,
                admission.userns,
                workdir=warm.source,
                seccomp=admission.seccomp,
            )
            verify(expected, as_command_user(inspect, INIT_USER, expected.user))
        except SprawlError as err:
            return f"it no longer matches what was asked: {err.detail}"
        return None

    # -- releasing it -----------------------------------------------------------------------
    def release(self, warm: Warm) -> None:
        """A command is done with it: back to the idle list for the next command of its copy
        and run (removed when the pool is closed or past IDLE)."""
        evicted: list[Warm] = []
        with self._lock:
            if self._closed:
                evicted.append(warm)
            else:
                self._idle.append(warm)
                while len(self._idle) > IDLE:
                    evicted.append(self._idle.pop(0))
        for old in evicted:
            self.remove(old)

    def remove(self, warm: Warm) -> str | None:
        try:
            self.arm.engine.remove(warm.container)
        except SprawlError as err:
            return f"the warm container {warm.name} could not be removed: {err.detail}"
        finally:
            self.arm.left_copy(warm.copy)
        warm.watcher.gone(warm.name)
        return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for warm in idle:
            self.remove(warm)


def _cannot_run(warm: Warm, command: Sequence[str]) -> str | None:
    """Why the command's program can't run in the kept container, read through its init's
    root (None: it can): asked before an exec is made ahead and again before it starts."""
    return cannot_run(
        f"/proc/{warm.host.init}/root",
        command[0],
        str(warm.record.get("path") or "") or None,
        warm.workdir,
    )
