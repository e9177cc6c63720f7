"""The orchestrator's end of the guardian (design §4): a `Watcher` that writes protocol lines
to a `python -m sprawl_orch.guardian` process through a pipe whose write end only we hold --
or, with
`socket_path` (what ExecTool uses), through a connection to the one guardian that serves
every caller of a state directory (guardian/server.py), spawned by the first caller that
finds none listening. Either way the kernel closes our end however we die.

- Started lazily, by the first announcement, once per exec tool (not per command;
  `session_guardian` makes an exec tool's from its config). Spawning
  costs the caller well under 1 ms plus the fork (`benchmarks/guardian.py` prints it); the
  guardian boots and imports its engine clients on its own time.
- The guardian runs in its own session (`start_new_session`), so a signal to our process
  group does not reach it, and gets only the read end (`close_fds`; our write end is also
  O_CLOEXEC, so no command we start later inherits it and holds EOF back).
- Writes never raise. A guardian that died, never started, or stops reading for
  WRITE_STALL_SECONDS turns this into a no-op; the problem is reported once (`on_problem`,
  default: one line on stderr) and kept in `problem`. A message that cannot be written (an
  empty name, a relative path) is reported each time and dropped; the link stays up.
- `close()` is the normal end: the orchestrator has already removed its containers and
  copies, so the guardian finds nothing, and exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sprawl_orch.config import Config
from sprawl_orch.config.state import guardian_socket
from sprawl_orch.core.exec_place import KEY_NAMES
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.guardian.protocol import (
    Announcement,
    Done,
    Hello,
    Ok,
    ProtocolError,
    Reply,
    format_hello,
    format_message,
    parse_reply,
)
from sprawl_orch.runs.launch import Watcher

WRITE_STALL_SECONDS = 2.0
# How long a caller tries to reach (and if need be spawn) the shared guardian.
CONNECT_SECONDS = 10.0
# The checkout (or install) holding the guardian/ and orchestrator/ folders: the shared guardian
# is keyed by its code (GUARDIAN_CODE). `python -m sprawl_orch.guardian` itself needs sprawl-orch
# installed (pyproject's package-dir maps the folders under sprawl_orch).
_ROOT = Path(__file__).resolve().parents[2]
GUARDIAN_CODE = _ROOT / "guardian"
# The guardians this process started (pids): still its children until it exits, and the exec
# server's call kills every child of its own before it dies (cli/exec_server.py) -- the
# guardian among them was killed with the call it was to clean up after (a client SIGKILL
# left the container running).
STARTED: set[int] = set()


def _read_reply(sock: socket.socket) -> Reply | None:
    """The guardian's next line, if it is a reply (guardian/protocol.py)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            break
        data += chunk
    try:
        return parse_reply(data.decode("utf-8", "replace"))
    except ProtocolError:
        return None


def _finish_connection(sock: socket.socket, wait: float | None) -> int | None:
    """EOF for the guardian; with `wait`, its `done N` for this connection (an `ok` the
    guardian sent a socketpair caller comes before it; it closes after `done`)."""
    try:
        sock.shutdown(socket.SHUT_WR)
        if wait == 0.0:
            return None
        sock.setblocking(True)
        sock.settimeout(wait)
        said = b""
        while chunk := sock.recv(256):
            said += chunk
        for line in said.decode("ascii", "replace").splitlines():
            with contextlib.suppress(ProtocolError):
                reply = parse_reply(line)
                if isinstance(reply, Done):
                    return 1 if reply.left else 0
        return None
    except (OSError, ValueError):  # ValueError: settimeout() of a negative wait
        return None
    finally:
        sock.close()


def _stderr_once(problem: str) -> None:
    # stderr closed or broken: nowhere else to say it, and saying must never fail the caller
    with contextlib.suppress(OSError, ValueError):
        print(f"sprawl-orch: {problem}", file=sys.stderr, flush=True)


# What a guardian needs from its starter's environment: to find Python's programs and the
# engines it sweeps (docker's SDK and CLI, podman rootful and rootless), and its own settings.
# Nothing else: a shared guardian outlives the call that started it and serves later ones,
# and the caller's environment holds the values of [sandbox.secrets] (atksecrets: the
# guardian kept GH_PAT's value in its environ, in any core dump of it, for its whole life).
GUARDIAN_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",  # rootless podman's systemd cgroup manager
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    *KEY_NAMES,
)


def guardian_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The guardian's environment: the names of GUARDIAN_ENV that are set, nothing else."""
    return {name: environ[name] for name in dict.fromkeys(GUARDIAN_ENV) if name in environ}


class Guardian(Watcher):
    def __init__(
        self,
        session: str,
        engines: Sequence[str] = (),
        *,
        grace: float | None = None,
        log: Path | None = None,
        environ: Mapping[str, str] | None = None,
        argv: Sequence[str] | None = None,
        on_problem: Callable[[str], None] = _stderr_once,
        socket_path: Path | None = None,
    ) -> None:
        self.session = session
        self.engines = tuple(engines)
        self.grace = grace
        self.environ = dict(os.environ if environ is None else environ)
        # The guardian's JSON-lines log (what it found and removed after a crash); tests and
        # people debugging a leak set SPRAWL_GUARDIAN_LOG instead of touching the caller.
        named = self.environ.get("SPRAWL_GUARDIAN_LOG")
        self.log = log if log is not None else Path(named) if named else None
        # Tests replace the program (e.g. a guardian that exits at once).
        self._argv = list(argv) if argv is not None else None
        self.on_problem = on_problem
        self.problem: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.socket_path = socket_path
        self._sock: socket.socket | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- life -----------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        if self._sock is not None:
            return self._fd is not None and self.problem is None
        alive = self.process is not None and self.process.poll() is None
        return alive and self._fd is not None and self.problem is None

    def command(self) -> list[str]:
        if self._argv is not None:
            return list(self._argv)
        argv = [
            sys.executable,
            "-m",
            "sprawl_orch.guardian",
            "--session",
            self.session,
            "--engines",
            ",".join(self.engines),
        ]
        if self.grace is not None:
            argv += ["--grace", repr(self.grace)]
        return argv

    def start(self) -> None:
        """Spawn the guardian now (the first announcement does it otherwise)."""
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._fd is not None or self.problem is not None or self._closed:
            return
        if self.socket_path is not None:
            self._connect_locked(self.socket_path)
            return
        read_end, write_end = os.pipe()  # both O_CLOEXEC (PEP 446)
        try:
            self.process = self._popen(self.command(), stdin=read_end)
        except OSError as err:
            os.close(write_end)
            self._fail(
                f"the guardian could not be started ({err}); containers, process "
                "groups and copies will not be cleaned up if this process dies"
            )
            return
        finally:
            os.close(read_end)
        os.set_blocking(write_end, False)
        self._fd = write_end

    def _spawn_server(self, path: Path, inherit: int) -> None:
        argv = [
            sys.executable,
            "-m",
            "sprawl_orch.guardian",
            "--serve",
            str(path),
            "--inherit",
            str(inherit),
        ]
        idle = self.environ.get("SPRAWL_GUARDIAN_IDLE")  # seconds without callers (tests)
        if idle:
            argv += ["--idle", idle]
        # Not our child for long: its own session, no fd of ours, reaped by init.
        self.process = self._popen(argv, stdin=subprocess.DEVNULL, pass_fds=(inherit,))

    def _popen(
        self, argv: list[str], *, stdin: int, pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        """Start a guardian (per-session or shared) the one way both are started: its own
        session, cwd /, no fd of ours but `pass_fds`, stderr into the log when one is set."""
        env = guardian_env(self.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
        log = open(self.log, "ab") if self.log else None  # noqa: SIM115
        try:
            process = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=subprocess.DEVNULL,
                stderr=log or subprocess.DEVNULL,
                cwd="/",
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
            )
            STARTED.add(process.pid)
            return process
        finally:
            if log is not None:
                log.close()

    def _connect_locked(self, path: Path) -> None:
        """Connect and be greeted (`ok`). When none answers (none runs, or it is closing for
        idleness), start one and hand it our end of a socketpair as its first connection:
        nothing waits for it to boot -- what we write waits in the socket, as in a pipe --
        and our death is its EOF from the first byte on. If another guardian holds the lock
        by then, the new one serves our connection alone and leaves."""
        try:
            hello = format_hello(Hello(self.session, self.engines, self.grace)).encode()
        except ValueError as err:
            self._fail(f"the guardian cannot be asked ({err})")
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not inheritable
        try:
            sock.settimeout(CONNECT_SECONDS)
            sock.connect(str(path))
            sock.sendall(hello)
            if isinstance(_read_reply(sock), Ok):
                sock.setblocking(False)
                self._sock, self._fd = sock, sock.fileno()
                return
        except OSError:
            # no guardian answered (none runs, or it is leaving): start one, below
            pass
        sock.close()
        ours, theirs = socket.socketpair()
        try:
            self._spawn_server(path, theirs.fileno())
        except OSError as err:
            ours.close()
            self._fail(
                f"the guardian could not be started ({err}); containers, process "
                "groups and copies will not be cleaned up if this process dies"
            )
            return
        finally:
            theirs.close()
        ours.sendall(hello)
        ours.setblocking(False)
        self._sock, self._fd = ours, ours.fileno()

    def sibling(self, session: str, fd: int | None = None) -> Guardian:
        """Another connection to this (shared) guardian, with a session of its own: the owner
        of one warm container the exec server keeps (core/served_warm.py). With `fd`: that
        connection, already open (held by the server; a copy of it is used and never shut
        down here -- a shutdown would end it for every holder)."""
        other = Guardian(
            session,
            self.engines,
            grace=self.grace,
            environ=self.environ,
            on_problem=self.on_problem,
            socket_path=self.socket_path,
        )
        if fd is None:
            other.start()
        else:
            other._sock = socket.socket(fileno=os.dup(fd))
            other._fd = other._sock.fileno()
        return other

    def link(self) -> int:
        """The connection's descriptor (to hand it to the exec server: served_warm.hold)."""
        if self._fd is None or self._sock is None:
            raise OSError(self.problem or "no connection to the shared guardian")
        return self._fd

    def tell(self, message: Announcement) -> None:
        """The Watcher: every announcement method (orchestrator/runs/launch.py) lands here."""
        try:
            data = format_message(message).encode("utf-8")
        except ValueError as err:
            # A bad announcement (a caller's bug) is said, and the link stays up.
            with contextlib.suppress(Exception):
                self.on_problem(f"the guardian was not told {message}: {err}")
            return
        with self._lock:
            self._start_locked()
            if self._fd is None or self.problem is not None:
                return
            try:
                self._write_all(self._fd, data)
            except OSError as err:
                self._fail(
                    f"the guardian stopped listening ({err}); nothing will be cleaned "
                    "up for this session if this process dies"
                )

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        # Non-blocking with a bounded wait: a stopped guardian must not stall the orchestrator
        # (a full pipe, 64 KiB, would otherwise block every later command).
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                poller = select.poll()
                poller.register(fd, select.POLLOUT)
                if not poller.poll(int(WRITE_STALL_SECONDS * 1000)):
                    raise OSError(f"pipe full for {WRITE_STALL_SECONDS:g} s") from None

    def _fail(self, problem: str) -> None:
        if self.problem is not None:
            return
        self.problem = problem
        with contextlib.suppress(Exception):
            self.on_problem(problem)

    def close(self, wait: float | None = 0.0) -> int | None:
        """Close our end (EOF for the guardian). `wait`: seconds to wait for it to exit
        (None: until it does); returns its exit code if it exited by then. With a shared
        guardian: its word on this connection (0: nothing was left). Never raises."""
        with self._lock:
            self._closed = True
            fd, self._fd = self._fd, None
            sock, self._sock = self._sock, None
        if sock is not None:
            return _finish_connection(sock, wait)
        if fd is not None:
            # close(2) releases the fd even when it reports an error: nothing to undo
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.process is None:
            return None
        try:
            return self.process.wait(wait)
        except subprocess.TimeoutExpired:
            return None


def session_guardian(
    config: Config, state: Path, environ: Mapping[str, str], session: str, *, shared: bool
) -> Guardian:
    """The guardian of one exec tool's session (design §4); its process starts with the first
    announcement. `shared`: the state directory's one guardian (guardian/server.py), for a
    process that lives for one call (the CLI); else a guardian process of this tool's own."""
    # From the config, not the choice: admission (which the choice waits for) already
    # announces its probe containers.
    engines: tuple[str, ...] = ()
    container = config.sandbox.container
    if config.sandbox.arm in ("auto", "container"):
        engines = ENGINES if container.engine == "auto" else (container.engine,)
    # [sandbox.container] docker_host: the guardian removes what a killed caller left on the
    # daemon the arm uses, and only callers of that daemon share a guardian
    host = container.docker_host
    reach = None if host is None else {**os.environ, "DOCKER_HOST": host}
    socket_path: Path | None = None
    if shared:
        keyed = environ if host is None else {**environ, "DOCKER_HOST": host}
        try:
            socket_path = guardian_socket(state, keyed, GUARDIAN_CODE)
        except OSError:
            socket_path = None  # a guardian process of our own, as before
    return Guardian(session, engines, socket_path=socket_path, environ=reach)
