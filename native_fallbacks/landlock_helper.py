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

import ctypes
import marshal
import os
import signal
import struct
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


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI: 0 when Landlock is absent or disabled at boot."""
    libc = _libc()
    got = libc.syscall(
        ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0), CREATE_RULESET_VERSION
    )
    return int(got) if got > 0 else 0


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def restrict(abi: int, rules: list[tuple[str, int]], net: bool, scoped: int) -> None:
    """Create the ruleset, add one path-beneath rule per (path, rights), restrict self.
    `net`: handle TCP bind/connect (ABI >= 4) with no rule, so none is allowed."""
    libc = _libc()
    fs = handled_fs(abi)
    net_rights = (NET_BIND_TCP | NET_CONNECT_TCP) if net and abi >= 4 else 0
    scope = scoped if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", fs, net_rights, scope)
    elif abi >= 4:
        attr = struct.pack("=QQ", fs, net_rights)
    else:
        attr = struct.pack("=Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(
        libc.syscall(
            ctypes.c_long(SYS_CREATE_RULESET), buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)
        ),
        "landlock_create_ruleset",
    )
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:  # a place that does not exist here grants nothing
                continue
            try:
                if not os.path.isdir(f"/proc/self/fd/{fd}"):
                    rights &= FILE_RIGHTS
                beneath = struct.pack("=Qi", rights & fs, fd)
                rule = ctypes.create_string_buffer(beneath, len(beneath))
                _check(
                    libc.syscall(
                        ctypes.c_long(SYS_ADD_RULE),
                        ctypes.c_int(ruleset),
                        ctypes.c_int(RULE_PATH_BENEATH),
                        rule,
                        ctypes.c_uint32(0),
                    ),
                    f"landlock_add_rule {path}",
                )
            finally:
                os.close(fd)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        _check(
            libc.syscall(
                ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)
            ),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program: bytes) -> None:
    """The classic-BPF program (8 bytes per instruction) as this thread's seccomp filter;
    NO_NEW_PRIVS is already set (restrict)."""
    libc = _libc()
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
        "PR_SET_SECCOMP",
    )


def _children() -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
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
                os.kill(pid, signal.SIGKILL)
            except OSError:  # already gone (ESRCH): nothing left to kill
                continue
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:  # ECHILD: nothing is left below us, which is the goal
            return
        except InterruptedError:  # a signal arrived: wait again
            continue


def _status(code: int) -> int:
    if os.WIFSIGNALED(code):
        return 128 + os.WTERMSIG(code)
    return os.WEXITSTATUS(code) if os.WIFEXITED(code) else SETUP_FAILED


def _confine_and_exec(spec: dict[str, object]) -> None:
    argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in spec["env"].items()}  # type: ignore[attr-defined]
    rules = [(str(p), int(r)) for p, r in spec["rules"]]  # type: ignore[attr-defined]
    try:
        restrict(int(spec["abi"]), rules, bool(spec["net"]), int(spec["scoped"]))  # type: ignore[call-overload]
        load_seccomp(bytes(spec["seccomp"]))  # type: ignore[call-overload]
    except OSError as err:
        os.write(2, f"sprawl-orch landlock: {err}\n".encode())
        os._exit(SETUP_FAILED)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError as err:
        os.write(2, f"sprawl-orch landlock: {argv[0]}: {err.strerror}\n".encode())
        os._exit(NOT_FOUND)
    except OSError as err:
        os.write(2, f"sprawl-orch landlock: {argv[0]}: {err.strerror}\n".encode())
        os._exit(CANNOT_EXEC)


def main(fd: int) -> int:
    with os.fdopen(fd, "rb") as f:
        spec = marshal.loads(f.read())
    libc = _libc()
    _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "PR_SET_CHILD_SUBREAPER")
    pid = os.fork()
    if pid == 0:
        _confine_and_exec(spec)

    def stop(signum: int, _frame: object) -> None:
        reap_all()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    while True:
        try:
            _, code = os.waitpid(pid, 0)
            break
        except InterruptedError:  # a signal arrived: wait again
            continue
    reap_all()
    return _status(code)


if __name__ == "__main__":
    # argv[-1]: run as `-c BOOT CODE_FD SPEC_FD` (landlock.py) or as `helper.py SPEC_FD`
    sys.exit(main(int(sys.argv[-1])))
