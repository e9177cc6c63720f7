"""`python -I .../wasi_runtime.py DOOR MODULE_FD [COMPILER]`: the python arm's runtime process.

A fresh Python per command spent 0.9-1.2 s before the guest ran (the interpreter's start,
`import wasmtime`, the module mapped: issue 31), so this process pays that once: it imports
wasmtime, maps the compiled module through the fd sprawl-orch verified, then forks one process
per command. One serves a tool (wasi_forked.Runtime) or, held by the exec server
(wasi_shared.py), every served call of a user: a one-shot CLI call otherwise paid the ~1 s
start each time. The fork happens with one thread: wasmtime starts none to deserialize
(checked: /proc/self/task had 1 entry after Engine + Module.deserialize_file; compiling starts
a pool, which is why the compile is never done here), and this loop starts none either.

Each forked command is a new session (its own process group, which sprawl-orch announces to
the guardian and kills, as for any host command), gets its own Store, instance, fuel, memory
limit, wall-time deadline, environment and private /tmp from its spec (wasi_guest.run), and
inherits nothing a guest can reach from here: this process never runs a guest, so every
command starts from the same clean state whoever asked before. It waits on its go fd before
running, so sprawl-orch can announce it and put it in the run's cgroup first (EOF instead of a
byte: its owner is gone, it ends 125). It dies with this process (PR_SET_PDEATHSIG).
Once a command is reaped, the next guest of its key is pre-started (wasi_prepared.py): a
command of the same key is handed to it instead of a fork (the same answer, its pid), one of
another key kills it first; it is killed too when idle or when this process ends its loop.

DOOR is a SOCK_SEQPACKET socket: each owner hands over one end of a stream socket pair on it
(SCM_RIGHTS) and is answered `{"ready": PID}` (or `{"error": ...}` when the module did not
load) on that stream. Requests on a stream (a 4-byte length, then JSON; fds as SCM_RIGHTS):
`{"op": "run", "spec": {...}}` with fds [stdout, stderr, go] -> `{"pid": N}` once the child
is in its own session; `{"op": "reap", "pid": N}` -> `{"status": S}`, only for a pid started
on that same stream (the child is reaped only when asked, so its pid cannot be reused while
its owner signals it). An owner that hangs up leaves its commands to be reaped here. The
process ends when the door is closed by every holder and nothing is left to reap. Only
processes of sprawl-orch hold the door or a stream: neither has a path, and a socket's
/proc/PID/fd link cannot be opened (ENXIO).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("!I")
_GATE_EXIT = 125  # as HostProcess's gate: never released, never run
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [_HEADER.pack(len(data)) + data], fds or [])


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the fds that came with it; (None, []) at EOF."""
    head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, 8)
    if not head:
        return None, fds
    while len(head) < _HEADER.size:
        more = sock.recv(_HEADER.size - len(head))
        if not more:
            return None, fds
        head += more
    (size,) = _HEADER.unpack(head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


def spawn(
    door: socket.socket, module_fd: int, stderr: int, compiler: str = "cranelift"
) -> subprocess.Popen[bytes]:
    """This file run as the runtime process (by sprawl-orch), its end of the door and the
    verified module's fd its only descriptors; an empty environment. `compiler`: the one
    that made the module (wasi_tiering.py), which its engine must be configured with."""
    return subprocess.Popen(
        [sys.executable, "-I", __file__, str(door.fileno()), str(module_fd), compiler],
        env={},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        pass_fds=(door.fileno(), module_fd),
        # Its own session: a terminal's Ctrl+C meant for us does not reach it.
        start_new_session=True,
    )


def _guest_module(name: str = "wasi_guest") -> Any:
    # By path, as this file is run: -I keeps native_fallbacks/ off sys.path, and importing
    # sprawl_orch here would cost its package's import in this process for nothing.
    where = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_sprawl_{name}", where)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up there
    spec.loader.exec_module(module)
    return module


def load(guest: Any, module_fd: int, compiler: str = "cranelift") -> tuple[Any, Any]:
    """The module mapped through the fd sprawl-orch verified (the bytes hashed are the bytes
    mapped), as the per-command child did. Reading and hashing it again here cost a one-shot
    CLI command ~0.1-0.3 s for nothing: sprawl-orch checks the file's state before every
    fork (VerifiedModule) and replaces this process when it changed."""
    import wasmtime

    engine = guest.make_engine(compiler)
    module = wasmtime.Module.deserialize_file(engine, f"/dev/fd/{module_fd}")
    os.close(module_fd)
    return engine, module


def _deathsig() -> Any:
    """prctl(PR_SET_PDEATHSIG, SIGKILL) for the forked commands, or None off Linux."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no libc prctl (not Linux): no death signal to set
        return None
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _child(guest: Any, loaded: tuple[Any, Any], spec: dict[str, Any], fds: list[int]) -> None:
    """The forked command; never returns."""
    code = 1
    try:
        out, err, go = fds
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        if not os.read(go, 1):
            os._exit(_GATE_EXIT)
        os.close(go)
        # The owner's umask, not this process's: the exec server's (077) is no caller's,
        # and the files the guest makes in the copy are the caller's.
        if isinstance(spec.get("umask"), int):
            os.umask(spec["umask"])
        report = guest.run(spec, loaded)
        Path(spec["report"]).write_text(json.dumps(report), encoding="utf-8")
        code = int(report["exit_code"])
    except BaseException:
        # no report: sprawl-orch says the runtime failed, with this on the command's stderr
        traceback.print_exc()
    finally:
        os._exit(code)


class _Conn:
    """One owner's connection (a tool's Runtime): the commands it started, and only those
    it may reap -- another connection's pid, or any other, is refused."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pids: set[int] = set()
        self.specs: dict[int, dict[str, Any]] = {}  # what a pre-started guest is made after


class _Server:
    def __init__(self, door: socket.socket, guest: Any, loaded: tuple[Any, Any]) -> None:
        self.door = door
        self.guest = guest
        self.loaded = loaded
        self.conns: dict[int, _Conn] = {}
        self.orphans: dict[int, int] = {}  # pidfd -> pid: commands whose owner hung up
        self.poller = select.poll()
        self.deathsig = _deathsig()
        self.prep = _guest_module("wasi_prepared")
        self.prepared: Any = None  # wasi_prepared.Held: the one pre-started guest, or None

    def serve(self) -> None:
        self.poller.register(self.door, select.POLLIN)
        door_open = True
        # Ends when no one can reach it and nothing of its is left to reap: a replaced
        # runtime lives on, unkilled, until the commands it still runs have ended.
        while door_open or self.conns or self.orphans:
            held = self.prepared
            events = self.poller.poll(None if held is None else held.idle_ms())
            if held is not None and held is self.prepared and not events and not held.idle_ms():
                self._unprepare()  # not used within IDLE_SECONDS: killed
            for fd, _ in events:
                if self.prepared is not None and fd == self.prepared.pidfd:
                    self._unprepare()  # it ended unused (its start failed): reaped
                elif fd == self.door.fileno():
                    door_open = self._knock()
                elif fd in self.conns:
                    self._request(fd)
                elif fd in self.orphans:
                    pid = self.orphans.pop(fd)
                    self.poller.unregister(fd)
                    os.close(fd)
                    with contextlib.suppress(ChildProcessError):  # reaped already
                        os.waitpid(pid, 0)
        self._unprepare()

    def _knock(self) -> bool:
        """A connection handed over the door (its fd); False at EOF: no owner holds the
        door any more."""
        data, fds, _flags, _addr = socket.recv_fds(self.door, 16, 4)
        if not data and not fds:
            self.poller.unregister(self.door)
            return False
        for fd in fds:
            sock = socket.socket(fileno=fd)
            with contextlib.suppress(OSError):  # the owner is gone already
                send(sock, {"ready": os.getpid()})
            self.conns[fd] = _Conn(sock)
            self.poller.register(fd, select.POLLIN)
        return True

    def _request(self, fd: int) -> None:
        conn = self.conns[fd]
        try:
            message, fds = receive(conn.sock)
        except OSError:  # reset: the owner died
            message, fds = None, []
        if message is None:
            for extra in fds:
                os.close(extra)
            self._hung_up(fd, conn)
            return
        after = None
        if message.get("op") == "run" and len(fds) == 3:
            spec = message["spec"]
            pid = self._take(spec, fds) or self._fork(spec, fds)
            conn.pids.add(pid)
            conn.specs[pid] = spec
            answer: dict[str, Any] = {"pid": pid}
        elif message.get("op") == "reap":
            for extra in fds:
                os.close(extra)
            after = conn.specs.pop(message.get("pid"), None)  # type: ignore[arg-type]
            answer = self._reap(conn, message.get("pid"))
        else:
            for extra in fds:
                os.close(extra)
            answer = {"refused": "unknown request"}
        with contextlib.suppress(OSError):  # the owner is gone: its EOF comes next
            send(conn.sock, answer)
        if after is not None and answer.get("status") is not None:
            self._prepare(after)

    def _take(self, spec: dict[str, Any], fds: list[int]) -> int | None:
        """The pre-started guest's pid if it took this command (its key equal, its copy the
        same directory), else None: it is gone, and the command starts cold."""
        held = self.prepared
        if held is None:
            return None
        self.poller.unregister(held.pidfd)
        self.prepared = None
        if held.handoff(spec, fds, send, receive):
            held.release()
            for fd in fds:
                os.close(fd)
            return int(held.pid)
        held.kill()
        return None

    def _prepare(self, spec: dict[str, Any]) -> None:
        """A guest pre-started for the next command of `spec`'s key (wasi_prepared.py)."""
        self._unprepare()
        if self.prep.key(spec) is None:
            return
        wire = (send, receive)
        # a prepare dir gone or full: the next command starts cold, as before
        with contextlib.suppress(OSError):
            held = self.prep.prepare(spec, self._spawn, self.guest, self.loaded, wire)
            self.prepared = held
            self.poller.register(held.pidfd, select.POLLIN)

    def _unprepare(self) -> None:
        if self.prepared is not None:
            held, self.prepared = self.prepared, None
            with contextlib.suppress(KeyError):  # never registered, or unregistered already
                self.poller.unregister(held.pidfd)
            held.kill()

    def _reap(self, conn: _Conn, pid: object) -> dict[str, Any]:
        if not isinstance(pid, int) or pid not in conn.pids:
            # never forked for this owner: waiting on it would take another's status
            return {"status": None, "refused": f"pid {pid!r} was not started for you"}
        conn.pids.discard(pid)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # reaped already (never, as only its owner asks): unknown
            return {"status": None}
        return {"status": os.waitstatus_to_exitcode(status)}

    def _hung_up(self, fd: int, conn: _Conn) -> None:
        self.poller.unregister(fd)
        del self.conns[fd]
        conn.sock.close()
        for pid in conn.pids:
            # still ours to reap (a zombie at worst): reaped here when it ends
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:  # reaped already: nothing left to wait for
                continue
            self.orphans[pidfd] = pid
            self.poller.register(pidfd, select.POLLIN)

    def _fork(self, spec: dict[str, Any], fds: list[int]) -> int:
        pid = self._spawn(lambda: _child(self.guest, self.loaded, spec, fds))
        for fd in fds:
            os.close(fd)
        return pid

    def _spawn(self, body: Any) -> int:
        """Fork a process in a session of its own that dies with this one and runs `body`
        (which never returns); its pid once it is in its session."""
        me = os.getpid()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            self.door.close()
            for conn in self.conns.values():
                conn.sock.close()
            for pidfd in self.orphans:
                os.close(pidfd)
            if self.prepared is not None:
                self.prepared.chan.close()
                os.close(self.prepared.pidfd)
            os.setsid()  # before sprawl-orch hears the pid: the group it kills is this
            # Dies with the runtime: a killed runtime left its commands running, orphans
            # for init to reap. Checked after: the runtime may have died before the prctl.
            if self.deathsig is not None:
                self.deathsig()
            if os.getppid() != me:
                os._exit(_GATE_EXIT)
            os.close(ready_w)
            try:
                body()
            finally:
                os._exit(1)
        os.close(ready_w)
        os.read(ready_r, 1)  # EOF once the child is in its session (or died)
        os.close(ready_r)
        return pid


def _refuse_all(door: socket.socket, error: str) -> None:
    """The module did not load: the first owner to connect hears why, then this ends (the
    others see EOF and start their own, which says why again)."""
    _data, fds, _flags, _addr = socket.recv_fds(door, 16, 4)
    for fd in fds:
        with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
            send(sock, {"error": error})


def main() -> int:
    door = socket.socket(fileno=int(sys.argv[1]))
    guest = _guest_module()
    try:
        loaded = load(guest, int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "cranelift")
    except Exception as err:
        _refuse_all(door, f"{type(err).__name__}: {err}")
        return 1
    # A fork copies only the calling thread: one that held a lock wasmtime needs would leave
    # it held in every command. Checked where it can be (Linux), not assumed.
    with contextlib.suppress(FileNotFoundError):
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            _refuse_all(door, f"{threads} threads after loading: forking is not safe")
            return 1
    _Server(door, guest, loaded).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
