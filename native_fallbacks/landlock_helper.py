"""The per-command helper of the landlock mechanism: outside the Landlock domain, the
command's child subreaper, and the one process that confines the command before exec.

Run as `python -I -S -c BOOT CODE_FD SPEC_FD` (standard library only: no site, no package
import, nothing of the tree or PATH imported into it). CODE_FD holds this module compiled
and marshalled, SPEC_FD the spec (marshal: the command's argv and environment, the Landlock
rules, the seccomp program) written by landlock.py -- marshal, not json: json's import (re,
enum) cost ~60 ms of a command's start on a loaded machine. The helper itself runs with the
host-side environment.

1. PR_SET_CHILD_SUBREAPER: a `setsid` double-fork of the command is re-parented here, not
   to init (a subreaper of sprawl-orch itself would adopt every arm's orphans).
2. fork; in the child: PR_SET_NO_NEW_PRIVS, the Landlock ruleset (landlock_restrict_self),
   the seccomp program (seccomp_landlock.py: the bwrap arm's socket policy plus what a
   missing namespace leaves open, setsid/setpgid among them, so every process of the
   command stays in the helper's process group, which HostProcess and the guardian kill),
   then execvpe.
3. The helper waits for the command; when it ends, every process left below the helper is
   SIGKILLed and reaped, and the helper exits with the command's status (128+N for signal N).
   SIGTERM/SIGINT/SIGHUP to the helper do the same at once.
"""

from __future__ import annotations

# Only built-in modules: `signal` (enum, functools, collections), `os` and `struct` cost
# the helper more CPU than its own work (python -X importtime: signal alone 57 ms
# cumulative at load 20 on this machine's 2 cores), and every command pays it.
import _ctypes
import _signal
import _struct
import marshal
import posix
import sys

# <linux/landlock.h>
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every arch
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1
# The rights a rule on a file (not a directory) may carry; others are EINVAL there.
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
# Exit statuses of the helper when the command never ran (the arm reads them).
SETUP_FAILED = 125
NOT_FOUND = 127
CANNOT_EXEC = 126


def handled_fs(abi: int) -> int:
    """Every filesystem right this ABI knows: what is handled is denied unless a rule
    grants it."""
    rights = (FS_MAKE_SYM << 1) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


# libc's syscall() and prctl() through _ctypes, not the ctypes package: its import (class
# tables, struct, the pythonapi handle) doubled the helper's CPU before the command starts
# (~10 ms of ~20 on an idle core, x9 at load 18 on this machine's 2). The classes below are
# what ctypes.CDLL(None, use_errno=True) makes of a libc function and its `long` result.
class _Long(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "l"  # long = size_t's width on x86_64 and aarch64 (LP64)


class _Char(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "c"


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Long


class _Libc:
    def __init__(self) -> None:
        # None: the program itself and what it loaded (libc), as ctypes.CDLL(None) does;
        # the stub names only paths
        handle = _ctypes.dlopen(None, posix.RTLD_NOW)  # type: ignore[arg-type]
        self.syscall = _Function(_ctypes.dlsym(handle, "syscall"))
        self.prctl = _Function(_ctypes.dlsym(handle, "prctl"))


def _libc() -> _Libc:
    return _Libc()


def _buffer(data: bytes) -> _ctypes.Array[_Char]:
    """A C copy of `data` (its address: _ctypes.addressof), kept alive by the caller."""
    return (_Char * len(data)).from_buffer_copy(data)


def abi_version() -> int:
    """The kernel's Landlock ABI: 0 when Landlock is absent or disabled at boot."""
    libc = _libc()
    got = libc.syscall(_Long(SYS_CREATE_RULESET), None, _Long(0), CREATE_RULESET_VERSION)
    return int(got) if got > 0 else 0


def _check(result: int, what: str) -> int:
    if result < 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{what}: {posix.strerror(err)}")
    return result


def restrict(abi: int, rules: list[tuple[str, int]], net: bool, scoped: int) -> None:
    """Create the ruleset, add one path-beneath rule per (path, rights), restrict self.
    `net`: handle TCP bind/connect (ABI >= 4) with no rule, so none is allowed."""
    libc = _libc()
    fs = handled_fs(abi)
    net_rights = (NET_BIND_TCP | NET_CONNECT_TCP) if net and abi >= 4 else 0
    scope = scoped if abi >= 6 else 0
    if abi >= 6:
        attr = _struct.pack("=QQQ", fs, net_rights, scope)
    elif abi >= 4:
        attr = _struct.pack("=QQ", fs, net_rights)
    else:
        attr = _struct.pack("=Q", fs)
    # bytes are passed as a pointer to their buffer (the kernel only reads these)
    ruleset = _check(
        libc.syscall(_Long(SYS_CREATE_RULESET), attr, _Long(len(attr)), 0),
        "landlock_create_ruleset",
    )
    try:
        for path, rights in rules:
            try:
                fd = posix.open(path, posix.O_PATH | posix.O_CLOEXEC)
            except OSError:  # a place that does not exist here grants nothing
                continue
            try:
                if not _is_dir(fd):
                    rights &= FILE_RIGHTS
                beneath = _struct.pack("=Qi", rights & fs, fd)
                _check(
                    libc.syscall(_Long(SYS_ADD_RULE), ruleset, RULE_PATH_BENEATH, beneath, 0),
                    f"landlock_add_rule {path}",
                )
            finally:
                posix.close(fd)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        _check(libc.syscall(_Long(SYS_RESTRICT_SELF), ruleset, 0), "landlock_restrict_self")
    finally:
        posix.close(ruleset)


def load_seccomp(program: bytes) -> None:
    """The classic-BPF program (8 bytes per instruction) as this thread's seccomp filter;
    NO_NEW_PRIVS is already set (restrict)."""
    libc = _libc()
    instructions = _buffer(program)
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; } (LP64)
    prog = _struct.pack("=H6xQ", len(program) // 8, _ctypes.addressof(instructions))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0), "PR_SET_SECCOMP")
    del instructions  # the kernel copied the program


def _children() -> list[int]:
    out: list[int] = []
    try:
        tasks = posix.listdir("/proc/self/task")
    except OSError:  # no /proc: nothing to find; waitpid still reaps what ends
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
        except OSError:  # the thread ended meanwhile: it has no children to list
            continue
    return out


def _descendants() -> list[int]:
    seen: list[int] = []
    todo = _children()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo += [int(p) for p in f.read().split()]
        except OSError:  # gone meanwhile: its children are ours now, found next round
            continue
    return seen


def reap_all() -> None:
    """SIGKILL every process left below us (orphans are ours: subreaper) and reap them,
    until none is left; forks racing the kill are found on the next round."""
    while True:
        for pid in _descendants():
            try:
                posix.kill(pid, _signal.SIGKILL)
            except OSError:  # already gone (ESRCH): nothing left to kill
                continue
        try:
            posix.waitpid(-1, 0)
        except ChildProcessError:  # ECHILD: nothing is left below us, which is the goal
            return
        except InterruptedError:  # a signal arrived: wait again
            continue


def _is_dir(fd: int) -> bool:
    return (posix.fstat(fd).st_mode & 0o170000) == 0o040000  # S_ISDIR


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := posix.read(fd, 1 << 20):
        chunks.append(chunk)
    posix.close(fd)
    return b"".join(chunks)


def _execvpe(file: str, argv: list[str], env: dict[str, str]) -> None:
    """os.execvpe without importing os: PATH searched as os._execvpe does (an empty entry
    is the working directory; the first error other than not-found is the one raised)."""
    if "/" in file:
        posix.execve(file, argv, env)
    last: OSError = FileNotFoundError(2, "No such file or directory")
    saved: OSError | None = None
    for directory in env.get("PATH", "/bin:/usr/bin").split(":"):
        try:
            posix.execve(f"{directory}/{file}" if directory else file, argv, env)
        except (FileNotFoundError, NotADirectoryError) as err:
            last = err
        except OSError as err:
            last = err
            saved = saved or err
    raise saved or last


def _status(code: int) -> int:
    if posix.WIFSIGNALED(code):
        return 128 + posix.WTERMSIG(code)
    return posix.WEXITSTATUS(code) if posix.WIFEXITED(code) else SETUP_FAILED


def _confine_and_exec(spec: dict[str, object]) -> None:
    argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in spec["env"].items()}  # type: ignore[attr-defined]
    rules = [(str(p), int(r)) for p, r in spec["rules"]]  # type: ignore[attr-defined]
    try:
        restrict(int(spec["abi"]), rules, bool(spec["net"]), int(spec["scoped"]))  # type: ignore[call-overload]
        load_seccomp(bytes(spec["seccomp"]))  # type: ignore[call-overload]
    except OSError as err:
        posix.write(2, f"sprawl-orch landlock: {err}\n".encode())
        posix._exit(SETUP_FAILED)
    try:
        _execvpe(argv[0], argv, env)
    except FileNotFoundError as err:
        posix.write(2, f"sprawl-orch landlock: {argv[0]}: {err.strerror}\n".encode())
        posix._exit(NOT_FOUND)
    except OSError as err:
        posix.write(2, f"sprawl-orch landlock: {argv[0]}: {err.strerror}\n".encode())
        posix._exit(CANNOT_EXEC)


def main(fd: int) -> int:
    spec = marshal.loads(_read_all(fd))
    libc = _libc()
    _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "PR_SET_CHILD_SUBREAPER")
    pid = posix.fork()
    if pid == 0:
        _confine_and_exec(spec)

    def stop(signum: int, _frame: object) -> None:
        reap_all()
        posix._exit(128 + signum)

    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, stop)
    while True:
        try:
            _, code = posix.waitpid(pid, 0)
            break
        except InterruptedError:  # a signal arrived: wait again
            continue
    reap_all()
    return _status(code)


if __name__ == "__main__":
    # argv[-1]: run as `-c BOOT CODE_FD SPEC_FD` (landlock.py) or as `helper.py SPEC_FD`
    sys.exit(main(int(sys.argv[-1])))
