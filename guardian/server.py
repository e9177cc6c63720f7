"""One guardian for many callers: `python -m sprawl_orch.guardian --serve SOCKET` (design §4).

Each caller (an orchestrator process: a CLI call, a library user, `serve`) connects to the
unix socket and says `hello SESSION ENGINES GRACE`; that connection is its lifeline, as
testcontainers' Ryuk does with its socket. Unlike Ryuk, which waits ~10 s after the last
disconnect, the guardian cleans up behind a connection *at once* when it ends -- the caller
exited, crashed or was SIGKILLed, any way, the kernel closes its end -- in a thread of its
own, with the same reaper as ever (guardian/reaper.py: containers by name and label, late
creates, process groups, scratch copies, cgroups). Other callers' connections go on.

Life: the first caller that finds no guardian listening spawns one (orchestrator/
guardian_client.py) and hands it one end of a socketpair as its first connection, so the
caller never waits for it to boot. The guardian holds an exclusive lock beside the socket
for its whole life, so two spawned at once leave one listening (the other serves its own
caller's connection alone, then leaves). It exits once no connection has been open and no
cleanup has run for IDLE_SECONDS. A caller that connects while it is closing gets no `ok`
and spawns the next one. The socket is mode 0600 in the caller's state directory.

Saves every call a Python process (~0.2 s of CPU on these 2-core machines: interpreter,
psutil, the reaper, and an engine sweep at its EOF) -- see benchmarks/cli_oneshot.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import select
import socket
import threading
import time
from pathlib import Path

from sprawl_orch.guardian._engines import ReaperEngine, open_engine
from sprawl_orch.guardian._lifeline import Log, apply_lines, whole_lines
from sprawl_orch.guardian.protocol import (
    DEFAULT_GRACE,
    Done,
    Ok,
    ProtocolError,
    format_line,
    parse_hello,
)
from sprawl_orch.guardian.reaper import Reaper, Report
from sprawl_orch.guardian.watchlist import Watchlist

IDLE_SECONDS = 10.0
HELLO_SECONDS = 5.0


def lock_path(sock: Path) -> Path:
    return sock.with_name(sock.name + ".lock")


class Server:
    def __init__(self, path: Path, idle: float, docker_via: str, log: Log) -> None:
        self.path = path
        self.idle = idle
        self.docker_via = docker_via
        self.log = log
        self._engines: dict[str, ReaperEngine | None] = {}
        self._engines_lock = threading.Lock()
        self._state = threading.Condition()
        self._open = 0  # connections being served or cleaned up behind
        self._last = time.monotonic()

    def engines(self, names: tuple[str, ...]) -> list[ReaperEngine]:
        with self._engines_lock:
            for name in names:
                if name not in self._engines:
                    self._engines[name] = open_engine(name, self.docker_via)
                    if self._engines[name] is None:
                        self.log("engine-missing", engine=name)
            return [e for n in names if (e := self._engines[n]) is not None]

    def _adopt(self, conn: socket.socket) -> None:
        with self._state:
            self._open += 1
        threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def run(self, inherited: int | None = None) -> int:
        """`inherited`: the spawning caller's end of a socketpair, its first connection."""
        if inherited is not None:
            self._adopt(socket.socket(fileno=inherited))
        lock_fd = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another serves the socket: serve the caller who started us, then leave.
            self.log("already-serving", socket=str(self.path))
            os.close(lock_fd)
            with self._state:
                self._state.wait_for(lambda: self._open == 0)
            return 0
        # We hold the lock: a socket file left here belongs to a guardian that is dead.
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)  # the socket is born 0600: only this user connects
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old_mask)
        listener.listen(128)
        self.log("serving", pid=os.getpid(), socket=str(self.path), idle=self.idle)
        try:
            self._accept(listener)
        finally:
            listener.close()
            # removed by a successor guardian already: nothing to unlink
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            with self._state:  # cleanups still running finish before we go
                self._state.wait_for(lambda: self._open == 0)
            os.close(lock_fd)
        self.log("idle-exit", pid=os.getpid())
        return 0

    def _accept(self, listener: socket.socket) -> None:
        while True:
            ready, _, _ = select.select([listener], [], [], 0.2)
            if ready:
                self._adopt(listener.accept()[0])
                continue
            with self._state:
                if self._open == 0 and time.monotonic() - self._last >= self.idle:
                    return

    def _serve_one(self, conn: socket.socket) -> None:
        session = "?"
        try:
            session = self._lifeline(conn)
        except Exception as err:  # one caller's trouble must never end the others' guardian
            self.log("connection-failed", session=session, why=f"{type(err).__name__}: {err}")
        finally:
            conn.close()
            with self._state:
                self._open -= 1
                self._last = time.monotonic()
                self._state.notify_all()

    def _lifeline(self, conn: socket.socket) -> str:
        # A plain blocking fd: the lines are read with read(2) (a socket timeout would make
        # it non-blocking, and an empty read would look like EOF).
        if not select.select([conn], [], [], HELLO_SECONDS)[0]:
            self.log("refused-connection", why=f"no hello within {HELLO_SECONDS:g} s")
            return "?"
        lines = whole_lines(conn.fileno(), self.log)
        try:
            hello = parse_hello(next(lines).decode("utf-8"))
        except (StopIteration, ProtocolError, UnicodeDecodeError) as err:
            self.log("refused-connection", why=str(err) or "closed before hello")
            return "?"
        # The caller may already be dead (killed right after its hello, or before we booted,
        # with its socketpair end): its lines are still ours to read and act on.
        with contextlib.suppress(OSError):
            conn.sendall(format_line(Ok()).encode())
        self.log("ready", session=hello.session, pid=os.getpid(), engines=list(hello.engines))
        watch = Watchlist()
        refused = apply_lines(lines, watch, self.log, session=hello.session)
        eof = time.monotonic()
        self.log(
            "eof",
            session=hello.session,
            containers=watch.containers,
            pgroups=watch.pgroups,
            scratch=sorted(map(str, watch.scratch)),
            cgroups=sorted(map(str, watch.cgroups)),
            refused=refused,
        )
        grace = DEFAULT_GRACE if hello.grace is None else hello.grace
        if watch.empty() and not refused:
            # The caller took back all it announced (a normal end): nothing of it is left.
            report = Report()
        else:
            engines = self.engines(hello.engines)
            report = Reaper(hello.session, engines, grace, self.log).reap(watch)
        report.seconds = round(time.monotonic() - eof, 3)
        self.log("done", session=hello.session, **dataclasses.asdict(report))
        # the caller hung up after EOF: the reap is done and logged all the same
        with contextlib.suppress(OSError):
            conn.sendall(format_line(Done(bool(report.left))).encode())
        return hello.session
