"""`ContainerRun`: the `Running` of one verified, started container (design §3.5).

wait honours the window; kill SIGKILLs the container (its pid namespace takes every
process with it); finish collects stdout/stderr/exit code and State.OOMKilled, then
removes the container — a removal that fails is reported, never hidden.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from sprawl_orch.container.pids_watch import PidsWatch
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.unrunnable import after_start_refusal, loader_refusal, runtime_refusal
from sprawl_orch.engines.engine import ZERO_TIME, Attached, ContainerEngine, not_found_in_image
from sprawl_orch.runs.launch import Finished, Launch

# after kill(), how long the attached output may take to end
SETTLE_SECONDS = 30.0


def never_ran_code(state_code: int, words: str, attach_code: object) -> int:
    """The exit code of a command the runtime could not start, by `podman run`'s
    documented convention (126: cannot be invoked, 127: not found). `podman start
    --attach` itself exits 125 and leaves State.ExitCode at 0; docker sets 127/126/128."""
    if state_code != 0:
        return state_code
    if not_found_in_image(words):
        return 127
    if "permission denied" in words.lower():
        return 126
    return attach_code if isinstance(attach_code, int) else 125


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip()
    except OSError:
        return ""


class ContainerRun:
    def __init__(
        self,
        engine: ContainerEngine,
        container: str,
        name: str,
        launch: Launch,
        attached: Attached,
        record: Mapping[str, object],
        venv: str | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        self._after = after  # once the container is removed (ownership.take_back)
        self.engine = engine
        self.container = container
        self.name = name
        self.launch = launch
        self._attached = attached
        self._record = dict(record)
        self._venv = venv  # unrunnable.host_venv's sentence, when the program is one
        self._pids = PidsWatch(container)
        self._killed = False
        self._finished: Finished | None = None
        self._lock = threading.Lock()

    @property
    def stdout_path(self) -> Path:
        return self.launch.outputs / "stdout"

    @property
    def stderr_path(self) -> Path:
        return self.launch.outputs / "stderr"

    def wait(self, timeout: float | None) -> bool:
        if self._finished is not None:
            return True
        return self._attached.wait(timeout)

    def kill(self) -> None:
        if self._finished is not None:
            return
        self._killed = True
        self.engine.kill(self.container)

    def pids(self) -> list[int]:
        """Host pids: the container's init and everything under it."""
        if self._finished is not None:
            return []
        try:
            pid = int((self.engine.inspect(self.container).get("State") or {}).get("Pid") or 0)
        except SprawlError:
            return []
        if pid <= 0:
            return []
        try:
            root = psutil.Process(pid)
            return [pid, *(p.pid for p in root.children(recursive=True))]
        except psutil.Error:
            return []

    def finish(self) -> Finished:
        with self._lock:
            if self._finished is None:
                self._finished = self._finish()
            return self._finished

    def _finish(self) -> Finished:
        if not self._attached.wait(SETTLE_SECONDS if self._killed else None):
            # still running although we were asked to finish: end it first
            self._killed = True
            self.engine.kill(self.container)
            self._attached.wait(SETTLE_SECONDS)
        start_error = self._attached.collect()
        pids_hit = self._pids.stop()
        record = dict(self._record)
        exit_code: int | None = None
        oom = False
        try:
            state = self.engine.inspect(self.container).get("State") or {}
            oom = bool(state.get("OOMKilled"))
            exit_code = int(state.get("ExitCode", 0))
            if str(state.get("StartedAt", "")).startswith(ZERO_TIME):
                # the command never ran (e.g. program not found in the image)
                start_error = (
                    start_error
                    or str(state.get("Error") or "")
                    or _tail(self.stderr_path)
                    or "the container never started"
                )
                exit_code = never_ran_code(
                    exit_code, start_error, getattr(self._attached, "returncode", None)
                )
        except SprawlError as err:
            record["inspect_error"] = err.detail
        if start_error:
            record["start_error"] = start_error
        record["removed"] = self._remove(record)
        if self._after is not None:
            try:
                self._after()
            except SprawlError as err:
                record["ownership_error"] = err.detail
        return Finished(
            exit_code=exit_code,
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            killed=self._killed,
            oom_killed=oom,
            pids_hit=pids_hit,
            extra={"container": record},
            refusal=None if self._killed else self._refusal(start_error, exit_code),
        )

    def _refusal(self, start_error: str | None, exit_code: int | None) -> SprawlError | None:
        """The program could not be executed: podman's never-started container, runc's
        after-start execve failure, or a host venv's interpreter without its libraries."""
        program = self.launch.argv[0] if self.launch.shell_line is None else "/bin/sh"
        if start_error:
            return runtime_refusal(start_error, program, self._venv)
        try:
            size = self.stdout_path.stat().st_size
            stderr = self.stderr_path.read_bytes()[:4096].decode(errors="replace")
        except OSError:
            return None
        return after_start_refusal(program, exit_code, size, stderr, self._venv) or loader_refusal(
            program, exit_code, stderr, self._venv
        )

    def _remove(self, record: dict[str, object]) -> bool:
        try:
            self.engine.remove(self.container)
        except SprawlError as err:
            record["removal_error"] = f"{err.detail} (recovery: {err.recovery})"
            return False
        self.launch.watcher.gone(self.name)
        return True


def image_path(inspect: Mapping[str, object]) -> str | None:
    """The PATH the container got from its image (Config.Env at inspect), for the record."""
    config = inspect.get("Config")
    env = config.get("Env") if isinstance(config, dict) else None
    for item in env if isinstance(env, list) else ():
        if isinstance(item, str) and item.startswith("PATH="):
            return item.removeprefix("PATH=")
    return None
