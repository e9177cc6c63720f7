"""`sprawl-orch exec` as a thin client of the per-user exec server (issue 26).

The client sends its arguments, working directory and environment, and hands the server its
own stdin, stdout and stderr (SCM_RIGHTS): the server's process for this call writes the
command's bytes straight into them, live and byte for byte, exactly as the in-process CLI
does -- it *is* the in-process CLI, forked from a server that has imported it already
(cli/exec_server.py). The client then only forwards SIGINT, SIGTERM, SIGHUP and SIGWINCH and
exits as told: the command's status, or the signal it died of.

The client's connection is the call's lifeline: when the client dies (SIGKILL included) the
server's process for the call sees EOF and kills itself, and the guardian removes what it
held, as when the in-process CLI is killed today (design §4).

Where the server can't be reached or started, or its place is refused (core/exec_place.py),
the in-process CLI runs instead, and stderr says so once.
"""

from __future__ import annotations

import _json
import _socket
import contextlib  # loaded by site already: free
import os
import sys
import time
from pathlib import Path

from sprawl_orch.core.exec_place import (
    Refused,
    check_private,
    peer_uid,
    socket_path,
    traced,
    witness_proof,
)

# `_socket`, the socket module's C half, not socket.py (its enum conversions and selectors),
# and no typing: both are paid by every call's client start (core/exec_place.py says why).
# Likewise `_signal` (loaded at every interpreter's start: free) for signal.py's enums, and
# `_json`'s string encoder for json's package (its decoder and scanner): together ~4.5 ms of
# CPU a client start, next to `python -c pass`'s ~33 ms (measured 2026-12-03).
TYPE_CHECKING = False  # mypy reads any name TYPE_CHECKING as true
if TYPE_CHECKING:
    import signal as _signal
    import subprocess
    from typing import Any, NoReturn
else:
    import _signal

START_SECONDS = 10.0
FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGWINCH)
OFF = "SPRAWL_EXEC_SERVER"  # "0": always in-process


def connect(path: Path) -> _socket.socket:
    """Connected to the server at `path`, both of us checked; Refused or OSError otherwise."""
    check_private(path, _is_socket, "socket")
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)  # close-on-exec, as socket.py
    try:
        conn.connect(str(path))
        if peer_uid(conn) != os.getuid():
            raise Refused(f"the server at {path} runs as another uid: refused, nothing sent")
    except BaseException:
        conn.close()
        raise
    return conn


def _is_socket(mode: int) -> bool:
    import stat

    return stat.S_ISSOCK(mode)


def start_server(path: Path) -> subprocess.Popen[bytes]:
    """The server, in a session of its own, with a scrubbed environment: what it needs to find
    Python and its engines; each call brings its own environment (never kept)."""
    # imported here: only the first client of a server starts it (subprocess and what it
    # imports, selectors and threading, were ~10% of every client's start)
    import subprocess

    keep = ("PATH", "HOME", "XDG_RUNTIME_DIR", "SPRAWL_EXEC_SERVER_IDLE")
    from sprawl_orch.core.exec_place import KEY_NAMES, start_environment

    env = {k: os.environ[k] for k in (*keep, *KEY_NAMES) if k in os.environ}
    env.update(start_environment(dict(os.environ)))  # its interpreter starts as ours did
    return subprocess.Popen(
        [sys.executable, "-m", "sprawl_orch.cli.exec_server", str(path)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd="/",  # the first caller's directory is no later caller's (nor kept busy)
        close_fds=True,
    )


def reach() -> tuple[_socket.socket, Path]:
    path = socket_path(dict(os.environ))
    try:
        return connect(path), path
    except (FileNotFoundError, ConnectionRefusedError):
        pass  # none there yet, or a dead one's socket: start ours
    server = start_server(path)
    deadline = time.monotonic() + START_SECONDS
    delay = 0.002
    while True:
        try:
            return connect(path), path
        except (FileNotFoundError, ConnectionRefusedError):
            # not listening yet; a server that lost the start race exits 0 and the
            # winner's socket appears
            if server.poll() not in (None, 0) or time.monotonic() > deadline:
                raise Refused(
                    "the exec server did not start"
                    + (f" (it exited {server.returncode})" if server.returncode else "")
                ) from None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def in_process(args: list[str], why: str | None) -> NoReturn:
    if why:
        sys.stderr.write(f"sprawl-orch: the exec server is not used ({why}); running in-process\n")
        sys.stderr.flush()
    from sprawl_orch.cli import main

    main(args=["exec", *args], prog_name="sprawl-orch")
    raise SystemExit(0)


def run(args: list[str]) -> NoReturn:
    if os.environ.get(OFF) == "0" or traced():
        # traced (`strace -f`, a debugger): the tracer follows only what this process starts
        in_process(args, None)
    try:
        cwd = os.getcwd()
    except OSError as err:
        # a deleted directory has no name to send (the server's chdir would be to whatever
        # is at its old path now); the in-process CLI runs in it as it is
        in_process(args, f"the working directory can't be named: {err.strerror}")
    try:
        conn, path = reach()
    except (Refused, OSError) as err:
        in_process(args, str(err))
    if conn.fileno() <= 2:
        # we were started with a standard descriptor closed, and the connection took its
        # number: sent as that stream, the command read or wrote the connection itself (with
        # -i and stdin closed a served `cat` waited out the window). The in-process CLI is
        # what such a caller gets.
        conn.close()
        in_process(args, None)
    try:
        # a Landlock domain the server is outside of can't open it: the command would run
        # outside the caller's domain (exec_place.start_witness says why this is the test)
        proof = witness_proof(path)
    except Refused as err:
        conn.close()
        in_process(args, str(err))
    header = call_header(args, cwd, dict(os.environ), _umask(), *_signals())
    saved = _terminal_state()
    try:
        _send_fds(conn, len(header).to_bytes(4, "big"), (0, 1, 2, proof))
        conn.sendall(header)
    except OSError as err:
        os.close(proof)
        conn.close()
        in_process(args, f"the server hung up before the call: {err.strerror}")
    os.close(proof)
    before = {}
    for sig in FORWARDED:
        # one we were started ignoring (nohup's SIGHUP, a script's `&` job's SIGINT) stays
        # ignored, as in-process: forwarded, it killed the call
        if _signal.getsignal(sig) != _signal.SIG_IGN:
            before[sig] = _signal.signal(sig, lambda signum, frame: _forward(conn, signum))
    answer = b""
    while not answer.endswith(b"\n"):
        try:
            chunk = conn.recv(256)
        except OSError:  # a reset connection: no answer, said below
            chunk = b""
        if not chunk:
            break
        answer += chunk
    _restore(saved)
    kind, _, why = answer.decode(errors="replace").strip().partition(" ")
    if kind == "inprocess":  # the server's side could not take our process's settings
        conn.close()
        for sig, handler in before.items():
            _signal.signal(sig, handler)
        in_process(args, why)
    _exit(answer.decode(errors="replace").strip())


def call_header(
    args: list[str],
    cwd: str,
    env: dict[str, str],
    umask: int,
    blocked: list[int] | None = None,
    ignored: list[int] | None = None,
) -> bytes:
    """The call as the server reads it (cli/exec_server.py _receive): byte for byte what
    json.dumps gives (ASCII, a lone surrogate of an undecodable name as \\udcXX), by json's
    own C string encoder."""
    text = _json.encode_basestring_ascii
    words = ", ".join(text(a) for a in args)
    names = ", ".join(f"{text(k)}: {text(v)}" for k, v in env.items())
    return (
        f'{{"op": "exec", "args": [{words}], "cwd": {text(cwd)}, "env": {{{names}}}, '
        f'"umask": {int(umask)}, "blocked": {blocked or []}, "ignored": {ignored or []}}}'
    ).encode()


def _signals() -> tuple[list[int], list[int]]:
    """Our blocked signals and those we ignore, for the call's process to take
    (cli/exec_caller.py): exec(2) hands both to what the in-process CLI runs."""
    blocked = sorted(int(n) for n in _signal.pthread_sigmask(_signal.SIG_BLOCK, ()))
    ignored = [n for n in range(1, _signal.NSIG) if _signal.getsignal(n) == _signal.SIG_IGN]
    return blocked, ignored


def _send_fds(conn: _socket.socket, data: bytes, fds: tuple[int, ...]) -> None:
    """socket.send_fds without socket.py: `data` with `fds` as one SCM_RIGHTS message."""
    rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    conn.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])


def _umask() -> int:
    """Ours, for the call (the server's is not the caller's); set back at once (one thread)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _forward(conn: _socket.socket, signum: int) -> None:
    try:
        conn.sendall(b"S%d\n" % signum)
    except OSError:
        # the server's side is gone: its answer (or EOF) is what we exit on
        return


def _exit(answer: str) -> NoReturn:
    kind, _, value = answer.partition(" ")
    if kind == "exit" and value.isdigit():
        _leave(int(value))
    if kind == "signal" and value.isdigit():
        sys.stdout.flush()
        _signal.signal(int(value), _signal.SIG_DFL)
        os.kill(os.getpid(), int(value))
    sys.stderr.write(
        "sprawl-orch: E_INTERNAL: exec server: the call's process ended without a status "
        f"({answer or 'no answer'}); what you can do: run it again, or with {OFF}=0\n"
    )
    raise SystemExit(125)


def _leave(code: int) -> NoReturn:
    """Exit with `code` now, without the interpreter's teardown (module and object cleanup:
    ~3-6 ms of CPU, a sixth of what the client adds to `python -c pass`, measured
    2026-12-03). Nothing here needs it: the command's bytes went into our descriptors from
    the server's side, the terminal is restored already, no atexit hook is ours -- only our
    own std streams may hold bytes, flushed first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # the reader left: nothing owed
            stream.flush()
    os._exit(code)


def _terminal_state() -> list[Any] | None:
    """The caller's terminal as it is: `-it` makes it raw in the server's process, which may
    die before it restores it."""
    if not os.isatty(0):
        return None
    import termios

    try:
        return termios.tcgetattr(0)
    except termios.error:
        # a terminal that answers no attributes: nothing to restore
        return None


def _restore(saved: list[Any] | None) -> None:
    if saved is None:
        return
    import termios

    try:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
    except termios.error:
        # the terminal went away with the caller's session: nothing left to restore
        return
