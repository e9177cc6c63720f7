"""Where the per-user exec server listens, and the checks both ends make before trusting it.

One server per (uid, state directory, engine endpoints, code): the socket's name is a hash of
them, so a client never reaches a server of other code or other engines (those are left
running for their own clients and idle out). The code is the installed files' stamps, not
only the version: an editable install changed under a running server must not be served by
the old code.

The directory is `$XDG_RUNTIME_DIR/sprawl-orch` (when that is ours, 0700) else
`/tmp/sprawl-orch-exec-<uid>`, made 0700; the socket in it 0600. Refused, never used: a
directory or socket that is a link, owned by another uid, or open to group/others -- in /tmp
anyone can make the name first, and a socket planted there would receive the caller's
environment and descriptors.
"""

from __future__ import annotations

import _socket
import os
import stat
import sys
from pathlib import Path

# The thin client imports this module on every `sprawl-orch exec`: `_socket` (the socket
# module's C half) and the builtin SHA-256 spare it socket.py's enum conversions and selectors
# and hashlib's OpenSSL load -- ~4 ms and ~3 ms of a client's start, next to `python -c pass`'s
# ~29 ms (benchmarks/cli_oneshot.py's client row). The digest is the same SHA-256.
# (typing is not imported either: ~3 ms; mypy reads any name TYPE_CHECKING as true.)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from hashlib import sha256
else:
    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:  # 3.12 renamed it; a Python without it has hashlib's
        try:
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256

# The environment that chooses the state directory and the engines' endpoints.
KEY_NAMES = (
    "XDG_STATE_HOME",
    "HOME",
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "CONTAINER_HOST",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)
ROOTS = ("orchestrator", "guardian", "native_fallbacks")
# The environment an interpreter reads once, at its start: which code it imports (PYTHONPATH,
# ...: atkspare, the server ran the installed sprawl_orch for a caller's other code) and its
# locale -- the encoding of argv, environment and paths. (Not TZ: the command gets the caller's
# in its environment, and nothing on exec's path reads local time -- a key per zone would only
# start more servers; test_python_served varies TZ to vary the python arm's key.) A call's
# environment is set after the server's start and changes none of these, so the server gets
# the caller's and is keyed by them: a Latin-1 caller's argument `caf\xe9` reached its
# command as `caf\xc3\xa9` from a server started under UTF-8 (servedfaith).
START_NAMES = ("LANG", "LANGUAGE", "LOCPATH")
START_PREFIXES = ("LC_", "PYTHON")


def start_environment(environ: dict[str, str]) -> dict[str, str]:
    """What of `environ` an interpreter reads at its start (START_NAMES, START_PREFIXES)."""
    return {
        k: v for k, v in sorted(environ.items()) if k in START_NAMES or k.startswith(START_PREFIXES)
    }


class Refused(Exception):
    """The server's place can't be trusted or made; the client runs in-process instead."""


def code_stamp() -> str:
    """The installed code: every .py file's path, size and mtime (~230 lstats)."""
    here = Path(__file__).resolve().parent.parent  # the sprawl_orch package
    roots = [str(here)] + [str(here.parent / r) for r in ROOTS if (here.parent / r).is_dir()]
    lines: list[str] = []
    for root in dict.fromkeys(roots):
        _stamp_tree(root, lines)
    return sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _stamp_tree(top: str, lines: list[str]) -> None:
    """`top`'s .py files as "path:size:mtime" lines, depth first in name order, __pycache__
    skipped. By scandir of an open directory: the kind of each entry comes with the listing,
    and each file's lstat is relative to the directory, not a walk of its whole path -- the
    os.walk this replaced cost every client start ~1.9 ms of CPU for the same facts, this
    ~1.45 ms (measured side by side, 2026-12-03)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        subdirs = []
        for entry in entries:
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if name != "__pycache__":
                    subdirs.append(name)
            elif name.endswith(".py"):
                st = entry.stat(follow_symlinks=False)
                lines.append(f"{top}/{name}:{st.st_size}:{st.st_mtime_ns}\n")
    finally:
        os.close(fd)
    for name in subdirs:
        _stamp_tree(f"{top}/{name}", lines)


def runtime_dir(environ: dict[str, str]) -> Path:
    uid = os.getuid()
    xdg = environ.get("XDG_RUNTIME_DIR", "")
    base: Path | None = None
    if xdg and os.path.isabs(xdg):
        try:
            st = os.lstat(xdg)
        except OSError:
            # no such runtime dir (a stale variable): /tmp below
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            base = Path(xdg) / "sprawl-orch"
    place = base or Path("/tmp") / f"sprawl-orch-exec-{uid}"
    try:
        os.mkdir(place, 0o700)
    except FileExistsError:  # made before: checked below like a new one
        pass
    except OSError as err:
        raise Refused(f"can't make {place}: {err.strerror}") from err
    check_private(place, stat.S_ISDIR, "directory")
    return place


def check_private(path: Path, kind: object, what: str) -> None:
    """`path` is a `what` (not a link), ours, and nobody else's to open."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not kind(st.st_mode):  # type: ignore[operator]
        raise Refused(f"{path} is not a {what} (a link or another kind): refused")
    if st.st_uid != os.getuid():
        raise Refused(f"{path} belongs to uid {st.st_uid}, not {os.getuid()}: refused")
    if st.st_mode & 0o077:
        raise Refused(f"{path} is open to others (mode {st.st_mode & 0o777:o}): refused")


# What confines a process beyond its uid (/proc/PID/status): a caller run with fewer groups or
# capabilities, no_new_privs or a seccomp filter must not have its command run by a server
# that has more (an `unshare -n setpriv --no-new-privs` caller's command ran with the host's
# network and without no_new_privs through a server started outside).
STATUS_FIELDS = (
    "Gid",
    "Groups",
    "CapInh",
    "CapPrm",
    "CapEff",
    "CapBnd",
    "CapAmb",
    "NoNewPrivs",
    "Seccomp",
    "Seccomp_filters",
    # where it may run: a `taskset -c 0` caller's command ran on every CPU (atkspare)
    "Cpus_allowed",
    "Mems_allowed",
    # PR_SET_THP_DISABLE, kept across fork and exec: a caller's command got THP back (servedfaith)
    "THP_enabled",
)
NAMESPACES = ("mnt", "net", "pid", "ipc", "uts", "user", "cgroup", "time")


def context(pid: int | str = "self") -> str:
    """Everything that confines process `pid` besides its uid: status fields, namespaces,
    cgroup, root directory, resource limits and scheduling. A call runs in the server's
    context, so the server serves only callers of exactly its own; OSError when it can't be
    read."""
    proc = f"/proc/{pid}"
    parts = [
        line
        for line in _proc_text(f"{proc}/status").splitlines()
        if line.split(":", 1)[0] in STATUS_FIELDS
    ]
    for name in NAMESPACES:
        try:
            parts.append(os.readlink(f"{proc}/ns/{name}"))
        except FileNotFoundError:  # a kernel without this namespace kind: same for all
            parts.append(f"{name}:none")
    root = os.stat(f"{proc}/root")
    parts.append(f"root:{root.st_dev}:{root.st_ino}")
    parts.append(_proc_text(f"{proc}/cgroup"))
    parts.append(_proc_text(f"{proc}/limits"))
    # how it is scheduled -- nice, rt_priority, policy: fields 19, 40 and 41 of stat, counted
    # from 3 after the name's last ")" -- inherited by what it starts, as its limits are: a
    # `nice -n 19` or `chrt -b` caller's command ran at the server's (atkspare)
    sched = _proc_text(f"{proc}/stat")
    fields = sched[sched.rindex(")") + 2 :].split()
    parts.append(f"sched:{fields[16]}:{fields[37]}:{fields[38]}")
    # whom the OOM killer takes first: a `choom -n 800` caller's command ran at the 500 of the
    # caller that started the server (atkspare)
    parts.append(f"oom:{_proc_text(f'{proc}/oom_score_adj').strip()}")
    # the audit login (kept across fork and exec; readable by anyone): a caller of another
    # login session had its served command audited as the session that started the server
    # (atkserve). Absent without CONFIG_AUDIT: the same for every process then.
    for name in ("loginuid", "sessionid"):
        try:
            parts.append(f"{name}:{_proc_text(f'{proc}/{name}')}")
        except FileNotFoundError:  # a kernel without audit: no login to tell apart
            parts.append(f"{name}:none")
    return "\n".join(parts)


def traced() -> bool:
    """Whether a debugger or `strace -f` traces this process (TracerPid): it follows what the
    in-process CLI starts, not a server's call -- and a server it started would be traced, and
    waited for, until it idles out."""
    try:
        status = _proc_text("/proc/self/status")
    except OSError:  # no /proc (macOS): no server there either, reach() says so
        return False
    for line in status.splitlines():
        if line.startswith("TracerPid:"):
            return line.split()[1] != "0"
    return False


def _proc_text(path: str) -> str:
    """A /proc file's text, read raw. Read by both ends of every call (the client names its
    server by it, the server checks each caller): Path.read_text's buffered text layer cost
    ~0.17 ms of each context()'s 0.3. Undecodable bytes are kept escaped, not an error: the
    process name in `status` is whatever file the caller ran (a name not in UTF-8 crashed
    the client with UnicodeDecodeError)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "surrogateescape")


def socket_path(environ: dict[str, str]) -> Path:
    key = [os.getuid(), code_stamp(), context(), *(environ.get(n, "") for n in KEY_NAMES)]
    key.append(start_environment(environ))
    # the personality (`setarch -R`), inherited by the command as the context is: in the
    # socket's name only -- it confines nothing, and another process's is not ours to read
    # under Yama's ptrace scope (the server's check of its caller could not read it)
    key.append(_proc_text("/proc/self/personality"))
    # likewise the timer slack (PR_SET_TIMERSLACK, kept across fork and exec): another
    # process's needs CAP_SYS_NICE to read (servedfaith: a served command had the server's)
    try:
        key.append(_proc_text("/proc/self/timerslack_ns"))
    except FileNotFoundError:  # a kernel before 4.6: every process's slack is the default
        key.append("")
    # and whether a mapping may be writable and executable at once: PR_SET_MDWE (systemd's
    # MemoryDenyWriteExecute=) is kept across fork and exec and shown in no /proc file
    # (atkserve: a served command of such a caller mapped W+X; in-process it was refused). A
    # refusal by another rule (an LSM's execmem) keys a server of its own too: no harm.
    key.append(_write_execute_refused())
    name = sha256(repr(key).encode()).hexdigest()[:20]
    return runtime_dir(environ) / f"exec-{name}.sock"


def _write_execute_refused() -> bool:
    import mmap  # ~0.2 ms, a C module

    try:
        mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC).close()
    except OSError:  # EACCES: refused (MDWE, or an LSM's execmem rule), which is the answer
        return True
    return False


def peer_uid(conn: _socket.socket) -> int:
    """The connected peer's uid, as the kernel says (SO_PEERCRED: pid, uid, gid)."""
    return peer(conn)[1]


def peer(conn: _socket.socket) -> tuple[int, int]:
    """The connected peer's (pid, uid), as the kernel says (SO_PEERCRED: pid, uid, gid)."""
    raw = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred: 3 ints
    pid, uid = (int.from_bytes(raw[at : at + 4], sys.byteorder, signed=True) for at in (0, 4))
    return pid, uid


# -- the server's witness of its Landlock domain (atkserve) -----------------------------------
# Landlock is kept across fork and exec and shown nowhere in /proc, so context() can't compare
# a caller's domain with the server's: a caller allowed to make files only beneath /tmp had
# its served command make one anywhere (its in-process command was refused). What Landlock
# does show: a process in a domain may not inspect one outside it (ptrace read access, which
# opening /proc/PID/fd/N needs, whatever its uid or capabilities). So the server keeps one
# exec'd (dumpable) child in its own domain, its witness, and runs a call only when the caller
# hands over, opened by itself through /proc, the witness's stdin: the caller's domain is then
# the server's or one the server's is nested in -- the command no less confined than the
# caller -- never a domain the server is outside of. A hand-made call can't forge it: the pipe
# is held only by the witness and the server (not dumpable: closed to a caller's inspection).


def start_witness(path: Path) -> tuple[subprocess.Popen[bytes], tuple[int, int]]:
    """The server's witness (`cat` on a pipe only the server writes: it ends at the server's
    end, SIGKILL too) with its pid in `<socket>.witness`; (the process, its pipe's identity)."""
    import contextlib
    import shutil
    import subprocess

    cat = shutil.which("cat") or "/bin/cat"
    witness = subprocess.Popen(
        [cat],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={},  # readable by the user's other processes (that is its use): it holds nothing
    )
    assert witness.stdin is not None
    pipe = os.fstat(witness.stdin.fileno())
    place = f"{path}.witness"
    with contextlib.suppress(FileNotFoundError):  # a dead server's: replaced
        os.unlink(place)
    fd = os.open(place, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{witness.pid}\n".encode())
    finally:
        os.close(fd)
    return witness, (pipe.st_dev, pipe.st_ino)


def witness_proof(path: Path) -> int:
    """The client's side: the server's witness's stdin, opened through /proc (a descriptor to
    send with the call); Refused when this process may not open it -- a Landlock domain the
    server is outside of, or no witness to see."""
    try:
        fd = os.open(f"{path}.witness", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            pid = int(os.read(fd, 32))
        finally:
            os.close(fd)
    except (OSError, ValueError) as err:
        raise Refused(f"the server's witness can't be read: {err}") from err
    try:
        return os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise Refused(
            "the server's domain is not yours: you may not inspect its processes (a Landlock "
            f"domain of your own?): {err.strerror}"
        ) from err


def proves(fd: int, pipe: tuple[int, int]) -> bool:
    """The server's side: `fd` is its witness's pipe (witness_proof)."""
    try:
        st = os.fstat(fd)
    except OSError:  # no descriptor there (a hand-made call's number): nothing proven
        return False
    return stat.S_ISFIFO(st.st_mode) and (st.st_dev, st.st_ino) == pipe
