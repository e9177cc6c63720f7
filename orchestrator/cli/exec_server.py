"""The per-user exec server (issue 26): `python -m sprawl_orch.cli.exec_server SOCKET`, started
by the first thin client (client/exec_client.py), gone after IDLE_SECONDS with no call.

It holds what every one-shot call paid for before its first step: the interpreter and the
imports (click, pydantic, the config models, the exec tool, the docker SDK: ~260 ms of a
call's CPU, issue 26's measurement). Each call is a process forked from it -- the in-process
CLI with the caller's descriptors as its stdin/stdout/stderr, the caller's working directory
and the caller's environment (given per call; the server's own is scrubbed and no call's is
kept for another) -- so the CLI contract (exit statuses, --json, -C, --config, the statement
on stderr, byte-for-byte output) is the in-process one by construction.

The server is single-threaded (a fork of a threaded process may inherit a lock held
mid-flight), runs as the caller's uid, and answers only peers of its own uid (SO_PEERCRED).
The caller's connection is the call's lifeline: EOF on it kills the call's process with
SIGKILL, and the state directory's guardian removes its container, copy lease and process
group exactly as when the in-process CLI is killed (design §4). The server's own end does
not matter to a running call: it is a separate process with its own guardian connection.

With `warm = true` the server also keeps the calls' warm containers (core/served_warm.py):
each owned by a guardian connection the making call hands it, closed -- and the container
removed by the guardian -- when a call holding it dies, at `server stop`, or with the server.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TypedDict

from sprawl_orch.cli import exec_caller, exec_spare
from sprawl_orch.cli.exec_spare import preload
from sprawl_orch.core import served_memo, served_warm
from sprawl_orch.core.exec_place import context, peer, proves, start_witness
from sprawl_orch.native_fallbacks import wasi_shared

IDLE_SECONDS = 300.0
# The signals a client forwards (client/exec_client.py FORWARDED), as their lines say them.
FORWARDED = {
    str(int(s)).encode(): s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH)
}
HEADER_LIMIT = 8 << 20  # argv + environment; the kernel's ARG_MAX is far below
_PR_SET_DUMPABLE = 4  # <linux/prctl.h>
_PR_GET_DUMPABLE = 3
_WITNESS = (-1, -1)  # the server's witness's pipe (exec_place.start_witness), set in serve()


def serve(path: Path, idle: float) -> int:
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another server won the start: its socket is the one clients reach
    # Before anything is read: the server and every call forked from it hold parsed config,
    # each caller's environment (tokens) and secrets' values in memory, and any other process
    # of the same uid -- a copied_tree command among them -- could read that memory through
    # ptrace or /proc/<pid>/mem and /proc/<pid>/environ while the process is dumpable. A
    # fork keeps the flag; an exec (the command, the guardian, an engine CLI) resets it.
    not_dumpable()
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())  # `sprawl-orch server status|stop` read it
    # Each call takes its caller's umask and directory; the server's own are no caller's (it
    # kept its first caller's: a later umask-077 caller's command ran with umask 000).
    os.chdir("/")
    os.umask(0o077)
    own = context()
    global _WITNESS
    witness, _WITNESS = start_witness(path)  # before the socket: a caller finds it there
    preload()
    # a dead server's socket, or none (we hold the lock: no live one serves it)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(64)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # pidfd -> (pid, the caller's conn, the read end of what the call learned, the server's
    # end of the call's warm channel: core/served_warm.py)
    calls: dict[int, tuple[int, socket.socket, int, int]] = {}
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    last = time.monotonic()
    ended = 0  # calls ended so far: a spare forked before the last end is not used
    spare: exec_spare.Spare | None = None

    def leave() -> None:
        """In a child (a call, a spare): the listener and other calls' connections and
        channels are not its own -- held there, a dead server's caller waited on a live
        call's copy for EOF. Nor is the start lock: held by a call that outlived its killed
        server, every new server lost its start to it (each caller waited 10 s, then ran
        in-process)."""
        listener.close()
        os.close(lock)
        witness.stdin.close()  # type: ignore[union-attr]  # ends with the server, not with us
        for pidfd, (_, other, theirs, warm) in calls.items():
            os.close(pidfd)
            os.close(theirs)
            os.close(warm)
            other.close()

    def call(conn: socket.socket, teach: int, keep: int) -> None:
        served_warm.in_call(keep)
        _call(conn, teach)  # never returns

    def renew() -> None:
        """A spare for the next call, when one may be used (exec_spare.py)."""
        nonlocal spare
        if spare is None and not stopping:
            spare = exec_spare.fork_spare(ended, leave, call)

    renew()
    try:
        while not (stopping and not calls):
            if stopping and listener.fileno() >= 0:
                poller.unregister(listener)
                listener.close()
                with contextlib.suppress(FileNotFoundError):  # removed by hand: gone is the aim
                    os.unlink(path)
            if not calls and time.monotonic() - last > idle:
                break
            for fd, _ in poller.poll(1000):
                if fd == listener.fileno():
                    conn, _ = listener.accept()
                    if not _same(conn, own):
                        conn.close()  # another uid's or context's: nothing read or answered
                        continue
                    learned, teach = served_memo.channel()
                    kept, keep = served_warm.channel()
                    ready, spare = spare, None
                    if ready is not None and ready.generation != ended:
                        exec_spare.end(ready)  # not what a fork made now would be
                        ready = None
                    if ready is not None and exec_spare.hand(ready, conn, teach, keep):
                        pid = ready.pid
                    else:
                        pid = os.fork()
                        if pid == 0:
                            leave()
                            os.close(learned)
                            os.close(kept)
                            call(conn, teach, keep)  # never returns
                    os.close(teach)
                    os.close(keep)
                    pidfd = os.pidfd_open(pid)
                    calls[pidfd] = (pid, conn, learned, kept)
                    poller.register(pidfd, select.POLLIN)
                elif fd in calls:
                    pid, conn, learned, kept = calls.pop(fd)
                    poller.unregister(fd)
                    os.close(fd)
                    _, status = os.waitpid(pid, 0)
                    ended += 1
                    # what the call kept or gave back, before its caller hears the status:
                    # a killed call's container is the guardian's to remove from now on
                    served_warm.take_messages(kept, pid)
                    os.close(kept)
                    _answer(conn, status)
                    # after the answer: the caller does not wait for the server's memory
                    served_memo.take_learned(learned)
                    os.close(learned)
                    # the python arm's runtime a call asked for, held for the next calls
                    wasi_shared.after_call()
                    last = time.monotonic()
                    if spare is not None:
                        exec_spare.end(spare)  # forked before this end: not used
                        spare = None
                    renew()
    finally:
        if spare is not None:
            exec_spare.end(spare)
        served_warm.close_all()  # the guardian removes every kept warm container
        wasi_shared.close_all()
        witness.kill()  # its pipe's EOF ends it too (a SIGKILLed server's)
        witness.wait()
        with contextlib.suppress(FileNotFoundError):  # removed by hand: gone is the aim
            os.unlink(f"{path}.witness")
        if listener.fileno() >= 0:
            listener.close()
            with contextlib.suppress(FileNotFoundError):  # removed by hand: gone is the aim
                os.unlink(path)
    return 0


def not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0), checked: a server that cannot set it does not serve (its
    callers run in-process, said once by the client), since what it would hold for every
    later caller is exactly what the flag keeps from the caller's other processes."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _same(conn: socket.socket, own: str) -> bool:
    """The peer is of our uid and our context (exec_place.context): a call runs in the
    server's namespaces, groups and capabilities, so a caller with fewer must not reach it."""
    try:
        pid, uid = peer(conn)
        return uid == os.getuid() and context(pid) == own
    except OSError:  # the peer is gone, or its /proc is not ours to read: refused
        return False


def _answer(conn: socket.socket, status: int) -> None:
    """A call that ended by a signal can't say so itself: the server says it. (An exit status
    the call sent already; the client reads the first line only.)"""
    if os.WIFSIGNALED(status):
        with contextlib.suppress(OSError):  # the caller is gone: no one to tell
            conn.sendall(f"signal {os.WTERMSIG(status)}\n".encode())
    conn.close()


def _call(conn: socket.socket, teach: int) -> None:
    """The forked process of one call: the in-process CLI in the caller's place; what it
    learned (core/served_memo.py) goes back to the server on `teach` before it ends."""
    code = 125
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        request = _receive(conn)
        try:
            if not proves(request["proof"], _WITNESS):
                raise exec_caller.NotServed("the server's witness was not handed over")
            os.close(request["proof"])
            exec_caller.take(request["blocked"], request["ignored"], peer(conn)[0])
        except exec_caller.NotServed as why:
            with contextlib.suppress(OSError):  # the caller is gone: no one to tell
                conn.sendall(f"inprocess {why}\n".encode())
            os._exit(0)  # nothing ran: the client runs the call itself
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _watch(conn)
        from sprawl_orch.cli import main

        try:
            main(args=["exec", *request["args"]], prog_name="sprawl-orch")
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except KeyboardInterrupt:
            _flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    except BaseException as err:
        with contextlib.suppress(OSError):  # the caller's stderr is gone: no one to tell
            os.write(2, f"sprawl-orch: E_INTERNAL: exec server call: {err!r}\n".encode())
    _flush()
    served_memo.send_learned(teach)
    # Said by the call itself, so that a server that died meanwhile loses no status.
    with contextlib.suppress(OSError):  # the caller is gone: no one to tell
        conn.sendall(f"exit {code}\n".encode())
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # the reader left (`| head`): nothing owed
            stream.flush()


class Call(TypedDict):
    op: str
    args: list[str]
    cwd: str
    env: dict[str, str]
    umask: int
    blocked: list[int]  # the caller's signal mask and ignored signals (exec_caller.py)
    ignored: list[int]
    proof: int  # the server's witness's pipe, opened by the caller (exec_place.witness_proof)


def _receive(conn: socket.socket) -> Call:
    data, fds, _, _ = socket.recv_fds(conn, 4, 4, socket.MSG_CMSG_CLOEXEC)
    if len(data) != 4 or len(fds) != 4:
        for fd in fds:
            os.close(fd)
        raise ValueError("a call comes with its length and four descriptors")
    proof = fds.pop()
    size = int.from_bytes(data, "big")
    if size > HEADER_LIMIT:
        raise ValueError(f"a call of {size} bytes (limit {HEADER_LIMIT})")
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    body = b""
    while len(body) < size:
        chunk = conn.recv(min(1 << 20, size - len(body)))
        if not chunk:
            raise ValueError("the caller hung up mid-call")
        body += chunk
    request = json.loads(body)
    if not (
        isinstance(request, dict)
        and request.get("op") == "exec"
        and isinstance(request.get("cwd"), str)
        and isinstance(request.get("args"), list)
        and all(isinstance(a, str) for a in request["args"])
        and isinstance(request.get("umask"), int)
        and 0 <= request["umask"] <= 0o777
        and isinstance(request.get("env"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())
        and all(_signals(request.get(k)) for k in ("blocked", "ignored"))
    ):
        raise ValueError("not an exec call")
    return Call(
        op="exec",
        args=request["args"],
        cwd=request["cwd"],
        env=request["env"],
        umask=request["umask"],
        blocked=request["blocked"],
        ignored=request["ignored"],
        proof=proof,
    )


def _signals(given: object) -> bool:
    return isinstance(given, list) and all(
        isinstance(n, int) and 0 < n < signal.NSIG for n in given
    )


def _end_children() -> None:
    """Kill every process this call started (its guardian aside), each with its process
    group, before the call kills itself: a command started an instant before its group
    reached the guardian (host arms start it, then announce it) would otherwise outlive a
    client killed in that instant (test_exec_client's client SIGKILL saw it under load)."""
    import psutil

    from sprawl_orch.runs.guardian_client import STARTED
    from sprawl_orch.runs.process import STARTING

    # no command starts from here on (one being started is listed below); bounded: a start
    # stuck past it is what the guardian is for
    STARTING.acquire(timeout=5.0)
    mine = os.getpgid(0)
    try:
        children = psutil.Process().children(recursive=True)
        # the guardian this call started is the one that cleans up after it: spared, with
        # what it runs (killed, nothing removed the container of a client's SIGKILL)
        spared = set(STARTED)
        for guardian in STARTED:
            with contextlib.suppress(psutil.Error):  # gone already: nothing to spare
                spared |= {p.pid for p in psutil.Process(guardian).children(recursive=True)}
    except psutil.Error:  # this process is going away anyway; the guardian does the rest
        return
    for child in children:
        if child.pid in spared:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already
            group = os.getpgid(child.pid)
            if group != mine:
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):  # gone already
            child.kill()


def _watch(conn: socket.socket) -> None:
    """The lifeline: the caller's signals arrive as lines; its EOF kills this call now."""
    import threading

    def watch() -> None:
        buffered = b""
        while True:
            try:
                chunk = conn.recv(64)
            except OSError:  # a reset connection: the caller is gone, as at EOF
                chunk = b""
            if not chunk:
                _end_children()
                os.kill(os.getpid(), signal.SIGKILL)  # the guardian removes what we held
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                # only what the client forwards: any other number raised here (S99999:
                # OverflowError) and ended this thread, and with it the lifeline
                if line[:1] == b"S" and line[1:] in FORWARDED:
                    os.kill(os.getpid(), FORWARDED[line[1:]])

    threading.Thread(target=watch, name="sprawl-lifeline", daemon=True).start()


if __name__ == "__main__":
    idle = float(os.environ.get("SPRAWL_EXEC_SERVER_IDLE", IDLE_SECONDS))
    sys.exit(serve(Path(sys.argv[1]), idle))
