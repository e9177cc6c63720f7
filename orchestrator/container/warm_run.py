"""One command in a warm container (warm.py says what warm mode keeps true): the kept
container (Warm), what the pool needs of the arm (WarmArm), and the command's Running
(WarmRun): entered by an exec, waited on, and after it every process it left killed, the
writable places and SysV IPC reset, the container given back or replaced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.admitted import Admission
from sprawl_orch.container.argv import HostLimits, fit_limits
from sprawl_orch.container.command import command_env
from sprawl_orch.container.ownership import own_copy
from sprawl_orch.container.run import SETTLE_SECONDS
from sprawl_orch.container.warm_exec import Asked, Entered, enter
from sprawl_orch.container.warm_host import HostView
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.runs.launch import Finished, Launch, Watcher


class Warm:
    """One kept container, bound to one copy and run."""

    def __init__(
        self,
        container: str,
        name: str,
        copy: Path,
        run: str,
        workdir: str,
        watcher: Watcher,
        host: HostView,
        record: dict[str, object],
        owner: tuple[int, int],
    ) -> None:
        self.container, self.name, self.copy, self.run = container, name, copy, run
        self.workdir, self.watcher, self.host, self.record = workdir, watcher, host, record
        self.owner = owner  # the command's host uid:gid (podman --userns=auto: from its map)
        self.source: Path | None = None  # the working directory the copy is mounted as
        self.commands = 0


class WarmArm(Protocol):
    """What the pool needs of the container arm that makes it (arm.py's ContainerArm, which
    imports this module: a protocol here, so this module need not import it back)."""

    @property
    def config(self) -> ContainerConfig: ...
    @property
    def host(self) -> HostLimits: ...
    @property
    def engine(self) -> ContainerEngine: ...
    def admission(self) -> Admission: ...
    def create_verified(
        self,
        launch: Launch,
        command: Sequence[str],
        *,
        init_user: str | None = None,
        venv: str | None = None,
        read_only: tuple[tuple[str, str], ...] = (),
    ) -> tuple[str, str, dict[str, object]]: ...
    def left_copy(self, copy: Path) -> None: ...


class WarmPoolLike(Protocol):
    """What a command's run needs of its pool (warm.py's WarmPool, which imports this module)."""

    arm: WarmArm

    def remove(self, warm: Warm) -> str | None: ...

    def release(self, warm: Warm) -> None: ...


class WarmRun:
    """The `Running` of one command entered into a warm container."""

    def __init__(
        self,
        pool: WarmPoolLike,
        warm: Warm,
        launch: Launch,
        command: Sequence[str],
        replaced: str | None,
        made: Asked | None = None,
    ) -> None:
        self.pool, self.warm, self.launch = pool, warm, launch
        self._killed = False
        self._ended = False
        self._seen = False
        self._finished: Finished | None = None
        self._lock = threading.Lock()
        self._record = dict(warm.record)
        if replaced is not None:
            self._record["replaced"] = replaced
        self._record["reused"] = warm.commands > 0
        warm.host.unfrozen_kill = False
        warm.commands += 1
        self._oom_before = warm.host.oom_kills()
        user = fit_limits(pool.arm.config, pool.arm.host).user
        # the resynced copy goes to the command's host uid, as create_verified does for a
        # fresh container (entries already owned so are left alone)
        own_copy(warm.copy, *warm.owner)
        launch.outputs.mkdir(parents=True, exist_ok=True)
        self._entered: Entered = enter(
            pool.arm.engine,
            warm.container,
            command,
            command_env(launch),
            user,
            warm.workdir,
            launch.outputs / "stdout",
            launch.outputs / "stderr",
            made,
        )

    def wait(self, timeout: float | None) -> bool:
        """The command ended when the exec'd process did (what it left is killed then, as a
        fresh container's end takes everything with it)."""
        if self._ended:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        # The channel ends a moment after a short command exits: wait on it alone first;
        # asking the engine whether the process still runs costs an API call each time.
        step = 0.05
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if self._entered.ended(step if left is None else max(0.0, min(step, left))):
                self._ended = True
                return True
            if not self._command_alive():
                self.warm.host.kill_strays()  # they hold its stdout/stderr open
                self._ended = self._entered.ended(SETTLE_SECONDS)
                return self._ended
            if left is not None and left <= 0:
                return False
            step = min(step * 2, 0.25)

    def _command_alive(self) -> bool:
        said = self._entered.running()
        if said is not None:
            return said
        # Seen alive once before it may be declared gone: right after the exec the process
        # may not be in the container yet.
        alive = self.warm.host.command_alive(self.warm.host.strays())
        self._seen = self._seen or alive
        return alive or not self._seen

    def kill(self) -> None:
        if self._finished is not None:
            return
        self._killed = True
        self.warm.host.kill_strays()

    def pids(self) -> list[int]:
        return [] if self._finished is not None else self.warm.host.strays()

    def finish(self) -> Finished:
        with self._lock:
            if self._finished is None:
                self._finished = self._finish()
            return self._finished

    def _finish(self) -> Finished:
        host = self.warm.host
        if not self.wait(SETTLE_SECONDS if self._killed else None):
            self._killed = True
        clean = host.kill_strays()
        self._entered.close()
        exit_code = self._entered.exit_code()
        oom_after = host.oom_kills()
        oom = (
            self._oom_before is not None and oom_after is not None and oom_after > self._oom_before
        )
        replace: list[str] = []
        if not clean and host.freezer is None:
            replace.append(
                "no cgroup freezer was found for it, so what the command left was killed "
                "without being stopped first, a kill a process that keeps forking can outrun"
            )
        elif not clean:
            replace.append(
                "some of the command's processes were still there after its cgroup was "
                "frozen, killed and thawed"
            )
        if not host.baseline_intact():
            replace.append("its init died" + (" (OOM-killed)" if oom else ""))
        else:
            changed = host.reset_writable()
            if changed:
                replace.append(f"the command changed what it must not: {', '.join(changed[:5])}")
            ipc = host.reset_ipc()
            if ipc is not None:
                replace.append(f"its SysV IPC could not be emptied: {ipc}")
        record = dict(self._record)
        record["oom_killed"] = oom
        if replace:
            record["replaced_after"] = "; ".join(replace)
            left = self.pool.remove(self.warm)
            record["removed"] = left is None
            if left:
                record["removal_error"] = left
        else:
            record["removed"] = False
            self.pool.release(self.warm)
        return Finished(
            exit_code=exit_code,
            stdout_path=self.launch.outputs / "stdout",
            stderr_path=self.launch.outputs / "stderr",
            killed=self._killed,
            oom_killed=oom,
            extra={"container": record},
        )
