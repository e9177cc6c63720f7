"""A host command in its own process group, with output in files.

POSIX: the leader is waited for *without reaping* (pidfd, or waitid(WNOWAIT)), so its
pid -- and therefore its process group id -- cannot be reused while we signal
the group; only after the group is cleaned up is the leader reaped. Killing (halt, the
window, release) is SIGKILL to the whole group at once, as `docker kill` does to a
container, so a halted command ends 137 on every arm. A command that died of signal N
is reported as 128+N (the shell's and docker's convention), never Popen's -N.

Without process groups (Windows: no killpg, no waitid; chosen once by `GROUPS`): the
command gets CREATE_NEW_PROCESS_GROUP (a console Ctrl+C meant for us does not reach it),
Popen's open process handle keeps its pid from being reused, and the tree is what psutil
finds below the leader, killed with TerminateProcess (no SIGTERM to give first). A process
that detached from the tree escapes, as a setsid() one does on POSIX: these arms claim no
process-tree guarantee (the windows_job arm, which does, runs in a Job Object instead).
The guardian is not told of a group, since there is none for it to kill.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

import psutil

from sprawl_orch.core.command_input import TTY_OPEN, CommandInput
from sprawl_orch.core.private import private_dirs, private_file
from sprawl_orch.runs.launch import Finished, Join, NullWatcher, Watcher

# How long a SIGKILLed process may take to be gone (delivery is asynchronous).
TERM_GRACE_SECONDS = 1.0
# Held while a command is started. The exec server's lifeline (cli/exec_server.py
# _end_children) takes it, and never gives it back, before it lists this process's children:
# a command is then started before the listing (and killed with its group) or not at all.
# Without it a command started between the listing and the call's own SIGKILL was neither
# listed nor yet told to the guardian, and outlived its killed client (2 of 126 SIGKILLs of
# served copied_tree clients, 2026-12-03).
STARTING = threading.Lock()
# Wait for the go line on stdin, then give the command /dev/null as stdin, as without a gate.
_GATE_NULL = "read -r _ || exit 125; exec </dev/null;"
_GATE_READ = "read -r _ || exit 125;"
GROUPS = hasattr(os, "killpg") and hasattr(os, "waitid")
# Windows only; 0 elsewhere, where Popen refuses any creationflags (tests force GROUPS off).
_NEW_GROUP: int = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)


@cache
def can_use_pidfd() -> bool:
    """pidfd_open needs Linux >= 5.3; probe once and fall back to polling."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError:
        # no pidfd here (old kernel, seccomp): the pid-reuse check falls back to psutil
        return False
    os.close(fd)
    return True


class HostProcess:
    """A `Running` for commands that run as host processes (copied tree, bwrap, host)."""

    def __init__(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        outputs: Path,
        join: Join | None = None,
        watcher: Watcher | None = None,
        *,
        pass_fds: Sequence[int] = (),
        user: int | None = None,
        given: CommandInput | None = None,
    ) -> None:
        """`pass_fds`: kept open in the child (bwrap's --seccomp FD); `user`: the uid (and
        gid, no supplementary groups) the child drops to before exec -- a root caller's
        bwrap, so that its namespaces are made by an unprivileged principal. `given`: what
        the command reads (-i: a pipe; -t: a new terminal, command_input.py); None: nothing."""
        self._watcher = watcher or NullWatcher()
        private_dirs(outputs)
        self.stdout_path = outputs / "stdout"
        self.stderr_path = outputs / "stderr"
        gate_r = gate_w = -1
        stdin: int = subprocess.DEVNULL
        pipe = given.read_end if given is not None else None
        tty = given.tty_path if given is not None else None
        script: list[str] = []
        if join is not None:
            # Joining a cgroup leaves no window: the child starts as /bin/sh blocked on a pipe
            # (its stdin), we write its pid into the cgroup, then release it and it execs the
            # command -- so the command and all it starts are inside from the first instruction.
            # Not preexec_fn: unsafe with threads (serve's pool), as Python's docs warn. Not
            # CLONE_INTO_CGROUP: v2 only, and subprocess doesn't expose it. If we die before
            # releasing the gate, read() sees EOF and the command never runs (exit 125).
            # With -i the caller's pipe is the gate: its bytes follow the go line.
            if pipe is None:
                gate_r, gate_w = os.pipe()
            stdin = gate_r if pipe is None else pipe
            script.append(_GATE_READ if pipe is not None or tty is not None else _GATE_NULL)
        elif pipe is not None:
            stdin = pipe
        if given is not None and tty is not None:
            given.give_to(user)
            script.append(TTY_OPEN)  # in the new session: the controlling terminal
        if script:
            argv = ["/bin/sh", "-c", " ".join([*script, 'exec "$@"']), tty or "sprawl-gate", *argv]
        try:
            with (
                os.fdopen(private_file(self.stdout_path), "wb") as out,
                os.fdopen(private_file(self.stderr_path), "wb") as err,
                STARTING,
            ):
                self._popen = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env=dict(env),
                    stdin=stdin,
                    stdout=out,
                    stderr=err,
                    start_new_session=GROUPS,
                    creationflags=0 if GROUPS else _NEW_GROUP,
                    close_fds=True,
                    pass_fds=tuple(pass_fds),
                    user=user,
                    group=user,
                    extra_groups=None if user is None else [],
                )
            # Told before the command is released (gate) or gets far: the guardian kills the
            # group if we die. The leader stays unreaped until finish(), so its creation time
            # (the guardian's pid-reuse check) is readable even if it already exited.
            with contextlib.suppress(psutil.Error):
                created = psutil.Process(self._popen.pid).create_time()
                if GROUPS:
                    self._watcher.process_group(self._popen.pid, created)
            if join is not None:
                join.join(self._popen.pid)
                if gate_w >= 0:
                    os.write(gate_w, b"go\n")
                elif given is not None:
                    given.go()
        finally:
            for fd in (gate_r, gate_w):
                if fd >= 0:
                    os.close(fd)
        self.pid = self._popen.pid
        self.pgid = self.pid
        self._killed = False
        self._exited = False
        self._pidfd: int | None = None
        if can_use_pidfd():
            # exited already or no pidfd: kill verifies by psutil instead
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(self.pid)

    def _exited_now(self) -> bool:
        if self._exited:
            return True
        if not GROUPS:
            self._exited = self._popen.poll() is not None
            return self._exited
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            # reaped by another waiter: the child is gone, which is what we ask
            info = None
            self._exited = True
        if info is not None:
            self._exited = True
        return self._exited

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._pidfd is not None:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            while not self._exited_now():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                poller.poll(None if left is None else int(left * 1000) + 1)
                if deadline is not None and time.monotonic() >= deadline:
                    return self._exited_now()
            return True
        delay = 0.001
        while not self._exited_now():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        return True

    def pids(self) -> list[int]:
        """The leader and every live process of its group (descendants that left
        the group with setsid are followed through psutil while their parent lives)."""
        found: set[int] = set()
        for proc in psutil.process_iter(["pid"]) if GROUPS else ():
            # A process listed a moment ago may be gone: getpgid raises ProcessLookupError.
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == self.pgid:
                    found.add(proc.pid)
        with contextlib.suppress(psutil.Error):
            leader = psutil.Process(self.pid)
            found.update(child.pid for child in leader.children(recursive=True))
            if leader.status() != psutil.STATUS_ZOMBIE:
                found.add(self.pid)
        return sorted(found)

    def _signal_group(self, sig: int) -> None:
        # Safe while the leader is unreaped: its pid (= pgid) can't be reused.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def kill(self) -> None:
        self._killed = True
        stray = self._descendants()
        if not GROUPS:
            # exited already: nothing to kill; the strays are killed verified below
            with contextlib.suppress(OSError):
                self._popen.kill()
            _kill_verified(stray)
            self.wait(None)
            return
        self._signal_group(signal.SIGKILL)
        _kill_verified(stray)
        self.wait(None)

    def _descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []

    def finish(self) -> Finished:
        self.wait(None)
        # Whatever the command left in its group goes with it.
        if GROUPS:
            self._signal_group(signal.SIGKILL)
            self._watcher.process_group_gone(self.pgid)  # before the reap frees the number
        else:
            _kill_verified(self._descendants())  # those still below the (exited) leader
        code = self._popen.wait()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return Finished(
            exit_code=128 - code if code < 0 else code,
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            killed=self._killed,
        )


def _kill_verified(procs: list[psutil.Process]) -> None:
    """SIGKILL processes captured earlier, unless their pid now names another
    process (psutil compares the creation time: `_raise_if_pid_reused`)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.is_running():
                proc.kill()
    # SIGKILL is delivered asynchronously: wait until each is dead (a zombie, or reaped by
    # whoever inherited it), so "killed" means gone when kill() returns.
    deadline = time.monotonic() + TERM_GRACE_SECONDS
    while time.monotonic() < deadline and any(_alive(p) for p in procs):
        time.sleep(0.005)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
