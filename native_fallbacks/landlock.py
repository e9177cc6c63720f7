"""The landlock mechanism of the `native` arm: Landlock + NO_NEW_PRIVS + seccomp, for Linux
machines where bwrap cannot make a user namespace (Ubuntu 24.04's AppArmor restriction,
unprivileged containers). No namespace at all: any unprivileged process may restrict
itself with Landlock (filesystem since 5.13, TCP bind/connect from ABI 4, signal and
abstract-socket scoping from ABI 6).

    [nice ionice] python -I -S -c BOOT CODE_FD SPEC_FD     (landlock_helper.py)
        helper: child subreaper, outside the domain; waits, kills what is left, exits
        └── child: NO_NEW_PRIVS, Landlock ruleset, seccomp (seccomp_landlock.py), execvpe

What the ruleset allows (everything else of every right the ABI knows is denied):
- read and execute: the bwrap arm's view (bwrap_view.command_view: the same list, resolved
  by the same code, guarded the same way -- never widened by the tree or PATH), /proc
  (the kernel's ptrace check guards other processes' files: a domain cannot ptrace-access
  a process outside it), the safe devices (/dev/null, zero, full, random, urandom);
- write: the command's copy, a private HOME and TMPDIR beside its output files (removed
  with them), and its own stdout/stderr files (`> /dev/stderr` reopens them);
- TCP: nothing (ABI >= 4, no port rule); every other protocol is refused by seccomp;
- scoped (ABI >= 6): no signal to, and no abstract unix socket of, any process outside.

The copy is NOT at the working directory's path (no mount namespace): a write by the
tree's own absolute path fails (the person's tree is not in any rule), it never lands.

A root caller's helper runs as sprawl-orch's own uid (sandbox_uid.py), which then owns
the copy, HOME and TMPDIR: as root the command would hold every capability, and
Landlock does not govern chown, chmod, utime or xattrs. For a non-root caller the command
is the caller's uid, and those calls reach every file of the caller's: the filesystem
axis is then not claimed (landlock_assurances).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from sprawl_orch.core.arms import ArmName, landlock_assurances, landlock_too_old
from sprawl_orch.core.assurances import Assurances
from sprawl_orch.core.environment import host_side_env
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.guard_memo import served_guard
from sprawl_orch.core.ownership import own_copy
from sprawl_orch.native_fallbacks import landlock_helper as kernel
from sprawl_orch.native_fallbacks.bwrap import drop_uid
from sprawl_orch.native_fallbacks.bwrap_view import View, command_view, system_view
from sprawl_orch.native_fallbacks.copied_tree import CopiedTreeArm
from sprawl_orch.native_fallbacks.probe import run_probe
from sprawl_orch.native_fallbacks.sandbox_uid import grant_search
from sprawl_orch.native_fallbacks.seccomp_filter import SeccompUnsupported
from sprawl_orch.native_fallbacks.seccomp_landlock import program
from sprawl_orch.native_fallbacks.view_memo import served_path_part
from sprawl_orch.runs.launch import Launch, Running
from sprawl_orch.runs.process import HostProcess
from sprawl_orch.runs.yielding import Yielders, yield_prefix

NETWORK_ABI = 4  # TCP bind/connect rules
SCOPE_ABI = 6  # signal and abstract unix socket scoping
READ = kernel.FS_EXECUTE | kernel.FS_READ_FILE | kernel.FS_READ_DIR
# Every right but device nodes (CAP_MKNOD anyway) and sockets (no AF_UNIX socket exists).
WRITE = (kernel.handled_fs(7) | READ) & ~(
    kernel.FS_MAKE_CHAR | kernel.FS_MAKE_BLOCK | kernel.FS_MAKE_SOCK
)
DEVICE_RW = kernel.FS_READ_FILE | kernel.FS_WRITE_FILE | kernel.FS_IOCTL_DEV
DEVICES_RW = ("/dev/null", "/dev/zero", "/dev/full")
DEVICES_R = ("/dev/random", "/dev/urandom")
STREAM_RIGHTS = kernel.FS_WRITE_FILE | kernel.FS_READ_FILE | kernel.FS_TRUNCATE
# What the helper runs as: its compiled code is handed over an fd, so the helper needs no
# path of ours (a root caller's sandbox uid could not reach a venv under /root) and no site.
BOOT = "import marshal, sys; exec(marshal.loads(open(int(sys.argv[1]), 'rb').read()))"


@cache
def abi() -> int:
    """The kernel's Landlock ABI, asked once per process (it cannot change until reboot)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return kernel.abi_version()
    except (OSError, AttributeError):
        # no libc syscall() (musl without it, a seccomp'd caller): no Landlock to use
        return 0


def rules(
    view: View, writable: Sequence[Path], streams: Sequence[Path] = ()
) -> list[tuple[str, int]]:
    """(path, rights) for the ruleset. Pure but for nothing: paths are opened by the helper."""
    out = [(p, READ) for p in view.binds]
    out += [("/proc", kernel.FS_READ_FILE | kernel.FS_READ_DIR), ("/dev", kernel.FS_READ_DIR)]
    out += [(d, DEVICE_RW) for d in DEVICES_RW] + [(d, kernel.FS_READ_FILE) for d in DEVICES_R]
    out += [(str(p), STREAM_RIGHTS) for p in streams]
    out += [(str(p), WRITE) for p in writable]
    return out


def spec(
    argv: Sequence[str], env: Mapping[str, str], found: int, ruleset: list[tuple[str, int]]
) -> bytes:
    """What the helper reads from SPEC_FD."""
    return marshal.dumps(
        {
            "argv": list(argv),
            "env": dict(env),
            "abi": found,
            "rules": ruleset,
            "net": found >= NETWORK_ABI,
            "scoped": kernel.SCOPE_ABSTRACT_UNIX_SOCKET | kernel.SCOPE_SIGNAL,
            "seccomp": program(),
        }
    )


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


@cache
def _helper_source() -> bytes:
    """The helper compiled once per process (the interpreter that runs it is this one, so
    marshal's format matches)."""
    code = compile(Path(kernel.__file__).read_bytes(), "landlock_helper", "exec")
    return marshal.dumps(code)


def python() -> str:
    return os.path.realpath(sys.executable)


def helper_argv(code_fd: int, spec_fd: int) -> list[str]:
    return [python(), "-I", "-S", "-B", "-c", BOOT, str(code_fd), str(spec_fd)]


def _true() -> str:
    return "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"


class LandlockArm(CopiedTreeArm):
    name: ArmName = ArmName.LANDLOCK

    def __init__(
        self,
        yielders: Yielders,
        *,
        user: int | None = -1,
        places: Sequence[Path] = (),
        caller_home: str | None = None,
        found: int | None = None,
    ) -> None:
        """As BwrapArm's: `user` -1 chooses (ours for a root caller), `places` never in the
        view, `caller_home` the guard's reference. `found`: the ABI (default: asked)."""
        super().__init__(yielders)
        self.user = drop_uid() if user == -1 else user
        self.abi = abi() if found is None else found
        self._system = system_view()
        # Kept by the exec server as bwrap's is (core/guard_memo.py: keyed by every account
        # home, the real path of each and the places): built once, not ~5 ms every call.
        self._guard = served_guard(
            caller_home if caller_home is not None else os.environ.get("HOME"),
            places,
            self._system.binds,
            grants=self.user is not None,
        )
        self._proved = False

    def assurances(self) -> Assurances:
        return landlock_assurances(self.abi, own_principal=self.user is not None)

    def note(self) -> str | None:
        parts = [
            f"Landlock ABI {self.abi} with seccomp, no namespace: reads are limited to the "
            "system directories, the programs on PATH and the tree's virtualenv interpreters; "
            "writes to the copy, a private HOME and TMPDIR. The copy is not at your working "
            "directory's path: a write by the tree's absolute path fails."
        ]
        if self.abi < NETWORK_ABI:
            parts.append(f"TCP is not governed before Landlock ABI {NETWORK_ABI}.")
        if self.abi < SCOPE_ABI and self.user is None:
            parts.append(
                f"Signals are not scoped before Landlock ABI {SCOPE_ABI}: the command, of your "
                "uid, can kill what would clean up behind it, so the process tree is not kept."
            )
        if self.user is not None:
            parts.append(
                f"The command runs as uid {self.user}, which no account holds, as every "
                "landlock command of a root caller does, with no namespace between them. "
                "Landlock governs no file times: a file outside the copy that every account "
                "may write (mode o+w) can have its times set to now by its path, as any "
                "process on this machine could; its bytes, bits and attributes cannot change."
            )
        else:
            parts.append(
                "The command runs as your uid: Landlock does not govern chmod, chown, utime "
                "or extended attributes, so it can change those of your files outside the copy."
            )
        parts.append("setsid() and setpgid() are refused: the command keeps one process group.")
        return " ".join(parts)

    def prepare(self, workdir: Path) -> None:
        problem = landlock_too_old(self.abi)
        if problem is not None:
            raise SprawlError(
                ErrorCode.SANDBOX_DENIED, "landlock", problem.phrase, problem.recovery
            )
        if not self._proved:
            ok, why = self._probe()
            if not ok:
                raise SprawlError(
                    ErrorCode.SANDBOX_DENIED,
                    "landlock",
                    f"the landlock helper could not confine /bin/true: {why}",
                    'use [sandbox.native] mechanism = "bwrap", or arm = "copied_tree"',
                )
            self._proved = True  # the kernel's ABI and the helper's code can't change now

    def _probe(self) -> tuple[bool, str]:
        try:
            data = spec([_true()], {"PATH": "/usr/bin:/bin"}, self.abi, rules(self._system, ()))
        except SeccompUnsupported as err:
            return False, f"no seccomp program for this machine: {err}"
        fds = [_memfd("sprawl-landlock", _helper_source()), _memfd("sprawl-spec", data)]
        try:
            if self.user is not None:
                grant_search(Path(python()).parent, self.user)
            return run_probe(helper_argv(*fds), "landlock", pass_fds=fds, user=self.user)
        finally:
            for fd in fds:
                os.close(fd)

    def start(self, launch: Launch) -> Running:
        workdir = launch.workdir or launch.cwd
        home = Path(launch.env.get("HOME", str(launch.outputs / "home")))
        tmp = launch.outputs / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        env = {**launch.env, "TMPDIR": str(tmp)}
        view = command_view(
            launch.env, workdir, launch.cwd, self._system, self._guard, served_path_part
        )
        writable = [launch.cwd, tmp] + ([home] if home.is_relative_to(launch.outputs) else [])
        streams = [launch.outputs / "stdout", launch.outputs / "stderr"]
        if self.user is not None:
            for place in writable:
                own_copy(place, self.user, self.user)
            grant_search(launch.cwd, self.user, *writable, Path(python()).parent)
            grant_search(Path("/"), self.user, *(Path(p) for p in view.binds))
        try:
            data = spec(launch.argv, env, self.abi, rules(view, writable, streams))
        except SeccompUnsupported as err:
            raise SprawlError(
                ErrorCode.SANDBOX_DENIED,
                "landlock",
                f"no seccomp program for this machine: {err}",
                'use a container arm, or ask for arm = "copied_tree"',
            ) from err
        fds = [_memfd("sprawl-landlock", _helper_source()), _memfd("sprawl-spec", data)]
        try:
            return HostProcess(
                yield_prefix(self.yielders) + helper_argv(*fds),
                launch.cwd,
                host_side_env(),
                launch.outputs,
                join=launch.join,
                watcher=launch.watcher,
                pass_fds=fds,
                user=self.user,
            )
        finally:
            for fd in fds:
                # EBADF only if already closed: the child holds its own copies
                with contextlib.suppress(OSError):
                    os.close(fd)
