"""The python arm's runtime process (wasi_runtime.py) from sprawl-orch's side, and the
`Running` of one command it forked.

A runtime loads the verified compiled module once; each command is a process it forks
(issue 31: a Python start and `import wasmtime` per command cost 0.9-1.2 s). A tool starts its
own, or -- in a call the exec server serves -- uses the one the server holds
(wasi_shared.py) over a stream of its own. Every command is still a process of its own in its
own session: announced to the guardian as a process group before it runs, put in the run's
cgroup, killed with SIGKILL (137) by the window, halt or release, and never reaped until it is
gone -- the runtime reaps it only when `finish` asks, and only for the owner it forked it for,
so the pid signalled cannot be another's. It dies with its runtime (PR_SET_PDEATHSIG): it
never runs on unowned; its zombie is then init's to reap.

The runtime is replaced, and the command's result says so, when it has ended (killed, or
crashed) or when the cache file changed since it loaded it: VerifiedModule checks the file's
state before every fork and hashes it again when it moved; the new runtime maps the fd that
check opened. A replaced runtime is not killed (another thread's command may still run on it):
hung up on, it ends itself once its commands have ended.

A runtime that started but never says it is ready (stopped, wedged in its start) held every
command waiting on it forever. The wait is bounded (connect): READY_SECONDS after the knock,
pushed on while a compile runs (the runtime's start competes with it for the CPU; a cold
compile is seconds quiet and far more under load). Past it the runtime is killed, the command
fails E_TOOL_UNAVAILABLE with subject STUCK, and the next command starts a fresh runtime.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.private import private_dirs, private_file
from sprawl_orch.native_fallbacks import wasi_module, wasi_prepared, wasi_runtime
from sprawl_orch.native_fallbacks.wasi_module import VerifiedModule
from sprawl_orch.native_fallbacks.wasi_ready import STUCK, NotReady, connect, stuck_error
from sprawl_orch.runs.launch import Finished, Launch, Watcher
from sprawl_orch.runs.process import GROUPS, can_use_pidfd

if TYPE_CHECKING:
    from sprawl_orch.native_fallbacks.wasi_shared import Shared


def usable() -> bool:
    """Fork, sessions and pidfds (Linux): elsewhere a Python per command (wasi_guest.py)."""
    return hasattr(os, "fork") and GROUPS and can_use_pidfd()


class Runtime:
    """A tool's way to the runtime process: its own, or the exec server's (`shared`, held by
    wasi_shared.py and inherited by the served call's fork) while that one loaded the module
    state this process verified. Thread-safe (serve starts commands from many threads)."""

    def __init__(self, module: VerifiedModule, logs: Path, shared: Shared | None = None) -> None:
        self._module = module
        self._logs = logs
        self._shared = shared
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._door: socket.socket | None = None  # our own runtime's; never the shared one
        self._sock: socket.socket | None = None
        self._dead = False  # the stream failed: its runtime ended
        self._loaded: tuple[int, ...] = ()
        self._retired: list[subprocess.Popen[bytes]] = []
        self._started: set[int] = set()  # pids forked for us and not yet reaped
        self._closed = False
        self._ever = False
        # A replacement warm() made, said by the next command's result.
        self._said: str | None = None
        # A stuck runtime warm() killed: the next command fails with it (not a second wait).
        self._stuck_err: SprawlError | None = None

    @property
    def used(self) -> bool:
        """Whether a command was forked."""
        return self._ever

    @property
    def shared(self) -> bool:
        """Whether commands go to the exec server's runtime."""
        return self._shared is not None and self._sock is not None and self._proc is None

    def warm(self) -> None:
        """Start (or replace) the runtime in the background, while the command's copy is
        made: a one-shot CLI call otherwise waited its ~1 s start after the copy. A failure
        here is raised again by fork(), in the command."""
        if self._sock is not None and not self._dead:
            return  # racy by design: fork() checks again under the lock
        threading.Thread(target=self._warm, name="wasm-runtime-warm", daemon=True).start()

    def _warm(self) -> None:
        # the command that follows tries again and says what is wrong
        with self._lock, contextlib.suppress(Exception):
            if not self._closed:
                try:
                    self._said = self._ensure() or self._said
                except SprawlError as err:
                    if err.subject == STUCK:
                        self._stuck_err = err

    def _ensure(self) -> str | None:
        fd = self._module.fd()  # re-checked (hashed again) when the file changed
        stamp = self._module.stamp()
        self._retired = [p for p in self._retired if p.poll() is None]
        said = None
        if self._sock is not None:
            status = self._proc.poll() if self._proc is not None else None
            if not self._dead and status is None and stamp == self._loaded:
                return None
            if not self._dead and status is None:
                said = (
                    "the compiled module's file changed since the python arm's runtime "
                    "process loaded it; it was checked again and a new runtime loaded it"
                )
            elif self._proc is not None:
                said = (
                    f"the python arm's runtime process (pid {self._proc.pid}) had ended "
                    f"(status {status}); a new one was started"
                )
            else:
                said = (
                    "the exec server's python arm runtime process had ended; this call "
                    "started its own"
                )
            self._drop()
        if self._shared is not None:
            if self._shared.stamp == stamp and self._proc is None:
                try:
                    self._sock = connect(self._shared.door, self._compiling)
                    self._loaded = stamp
                    return said
                except NotReady as err:
                    shared, self._shared = self._shared, None  # the next command: our own
                    shared.kill_stuck()
                    raise stuck_error(
                        shared.proc.pid, err.waited, self._logs / "shared.stderr"
                    ) from err
                except ConnectionError:  # the server's runtime is gone: we start our own
                    said = said or (
                        "the exec server's python arm runtime process had ended; this call "
                        "started its own"
                    )
            # another module state than the one it loaded, or gone: never used again here
            self._shared = None
        self._start(fd)
        self._loaded = stamp
        return said

    def _start(self, module_fd: int) -> None:
        door, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = private_dirs(self._logs) / "runtime.stderr"
        stderr = private_file(log)
        try:
            self._proc = wasi_runtime.spawn(theirs, module_fd, stderr, self._module.entry.compiler)
        finally:
            theirs.close()
            os.close(stderr)
        self._door = door
        try:
            self._sock = connect(door, self._compiling)
        except NotReady as err:
            pid = self._proc.pid
            self._drop(kill=True)
            raise stuck_error(pid, err.waited, log) from err
        except ConnectionError as err:
            self._drop(kill=True)
            if err.args and err.args[0]:
                raise SprawlError(
                    ErrorCode.SANDBOX_DENIED,
                    str(self._module.entry.path),
                    f"the python arm's runtime refused the compiled module: {err.args[0]}",
                    f"remove {self._module.entry.path.parent}; the next command compiles it afresh",
                ) from err
            last = ""
            # unreadable: the error is raised without the log's last line
            with contextlib.suppress(OSError):
                last = log.read_text(encoding="utf-8", errors="replace").strip()
            raise SprawlError(
                ErrorCode.TOOL_UNAVAILABLE,
                '[sandbox] arm = "python"',
                "the python arm's runtime process ended before it was ready: "
                + (last.splitlines()[-1] if last else "(nothing on its stderr)"),
                f"see {log}; reinstall the runtime: pip install 'sprawl-orch[python]'",
            ) from err

    def _compiling(self) -> bool:
        return wasi_module.compile_in_progress(self._module.entry.path.parent)

    def _drop(self, kill: bool = False) -> None:
        """Hang up. Our own runtime ends by itself once its commands in flight have ended
        (it reaps them; they die with it): not killed, as a replaced one may still run
        another thread's command. Killed when it has none (or `kill`): its orderly exit
        (wasmtime's teardown) held a one-shot CLI call back by ~0.1-0.5 s."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._door is not None:
            self._door.close()
            self._door = None
        if self._proc is not None:
            if kill or not self._started:
                self._proc.kill()
                self._proc.wait()
                # its pre-started guest died with it, its /tmp left behind
                wasi_prepared.sweep(str(self._logs / "prepared"))
            else:
                self._retired.append(self._proc)
            self._proc = None
        self._dead = False
        self._loaded = ()

    def _ask(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        assert self._sock is not None
        try:
            wasi_runtime.send(self._sock, message, fds)
            answer, _ = wasi_runtime.receive(self._sock)
        except OSError:
            # the runtime died under us (killed): the caller starts another
            answer = None
        if answer is None:
            self._dead = True
            raise ConnectionError("the python arm's runtime process ended")
        return answer

    def fork(self, spec: dict[str, Any], fds: list[int]) -> tuple[int, str | None]:
        """A command's process, waiting on its go fd; and a sentence if the runtime was
        replaced first."""
        with self._lock:
            if self._closed:
                raise _closed()
            if self._stuck_err is not None:  # warm() waited and killed it: said once
                stuck, self._stuck_err = self._stuck_err, None
                raise stuck
            said = self._ensure() or self._said
            self._said = None
            try:
                pid = int(self._ask({"op": "run", "spec": spec}, fds)["pid"])
            except ConnectionError:  # it died since the check: replaced, asked again
                said = self._ensure() or said
                pid = int(self._ask({"op": "run", "spec": spec}, fds)["pid"])
            self._started.add(pid)
            self._ever = True
            return pid, said

    def reap(self, pid: int) -> int | None:
        """The command's exit status (128+N for signal N); None when the runtime that forked
        it is gone or was replaced (its status went with it). Only a pid fork() returned."""
        with self._lock:
            if pid not in self._started:
                raise ValueError(f"pid {pid} was not started by this python arm runtime")
            self._started.discard(pid)
            if self._sock is None or self._dead:
                return None
            try:
                status = self._ask({"op": "reap", "pid": pid}, [])["status"]
            except ConnectionError:  # its runtime died: the status went with it (None)
                return None
        return None if status is None else (128 - status if status < 0 else int(status))

    def close(self) -> None:
        """Idempotent; fork() after it is refused."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._drop()


def _closed() -> SprawlError:
    return SprawlError(
        ErrorCode.INTERNAL,
        '[sandbox] arm = "python"',
        "the python arm's runtime was used after its tool was closed",
        "open a new ExecTool (or Session) for further commands",
    )


class ForkedGuest:
    """One command the runtime forked: a `Running`. Signals go through a pidfd, so they reach
    this process even if the runtime died and its pid was reaped and reused."""

    def __init__(self, runtime: Runtime, spec: dict[str, Any], launch: Launch) -> None:
        self._runtime = runtime
        self._watcher: Watcher = launch.watcher
        private_dirs(launch.outputs)
        self.stdout_path = launch.outputs / "stdout"
        self.stderr_path = launch.outputs / "stderr"
        out = private_file(self.stdout_path)
        err = private_file(self.stderr_path)
        go_r, go_w = os.pipe()
        try:
            self.pid, self.said = runtime.fork(spec, [out, err, go_r])
        except BaseException:
            os.close(go_w)
            raise
        finally:
            for fd in (out, err, go_r):
                os.close(fd)
        self._pidfd = os.pidfd_open(self.pid)
        self._killed = False
        try:
            with contextlib.suppress(psutil.Error):
                created = psutil.Process(self.pid).create_time()
                self._watcher.process_group(self.pid, created)
            if launch.join is not None:
                launch.join.join(self.pid)
            os.write(go_w, b"g")
        except BaseException:
            # never released (the cgroup refused it): ended, reaped, the guardian told
            os.close(go_w)
            self.kill()
            self.finish()
            raise
        os.close(go_w)

    def wait(self, timeout: float | None) -> bool:
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(ready)

    def kill(self) -> None:
        self._killed = True
        self._signal()
        self.wait(None)

    def _signal(self) -> None:
        # ended already: nothing to signal
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def pids(self) -> list[int]:
        # The guest cannot start a process (wasip1): the command is this one process.
        with contextlib.suppress(psutil.Error):
            if psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE:
                return [self.pid]
        return []

    def finish(self) -> Finished:
        self.wait(None)
        self._signal()
        self._watcher.process_group_gone(self.pid)  # before the reap frees the number
        code = self._runtime.reap(self.pid)
        os.close(self._pidfd)
        if code is None and self._killed:
            code = 137
        return Finished(
            exit_code=code,
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            killed=self._killed,
        )
