"""bubblewrap (`linux_namespaces`): the copy inside a fresh set of namespaces (design §6).

    bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session
          --cap-drop ALL
          --dev /dev --proc /proc --tmpfs /tmp --tmpfs /var/tmp --tmpfs /run
          --tmpfs /dev/shm --symlink ../run /var/run [--tmpfs $HOME]
          --ro-bind P P ... (the view: bwrap_view.py) --symlink usr/bin /bin ...
          --bind COPY WORKDIR --chdir WORKDIR --remount-ro / --seccomp FD -- ARGV

- The view is explicit (bwrap_view.py says why): `--ro-bind / /` showed every unix socket
  of the host, dockerd's included, and a read-only mount does not stop connect().
  Behind it, a seccomp program refuses new AF_UNIX sockets and io_uring
  (seccomp_filter.py).
- The copy is mounted at the working directory's own path, and the command starts there:
  absolute paths recorded in the tree (editable installs, venvs, build systems) resolve
  into the copy, never to the person's tree.
- `--unshare-all` alone only *tries* a user namespace (`--unshare-user-try`) and silently
  runs without one when the kernel refuses; the explicit `--unshare-user` makes that a
  failure instead, so the arm never runs with an axis missing.
- `--new-session` (setsid) stops the command from pushing keystrokes into the caller's
  terminal with TIOCSTI (CVE-2017-5226).
- Mount order matters: bwrap applies operations in order. The tmpfs mounts come first, so
  nothing bound later is hidden by them (a copy or a tool under /tmp or $HOME); the copy
  comes last, over anything bound at or above the working directory.
- `--die-with-parent` plus the pid namespace: when the command (or the bwrap we started)
  ends, the namespace's init dies and the kernel kills every process left in it, including
  ones that called setsid() and double-forked.
- A root caller's bwrap is started as a uid of sprawl-orch's own (sandbox_uid.py), which
  then owns the copy: the user axis is kept. A non-root caller cannot hand the command
  another uid: the user namespace maps it onto the caller's own, and the axis is not kept.

The probe runs the same arguments (as the same uid) with `/bin/true`, before any copy is
made. A pass is kept (probe_memo.py) only under bwrap's identity and the values of every
sysctl that governs user namespaces (`kernel.apparmor_restrict_unprivileged_userns`,
`user.max_user_namespaces`, ...), read again each time; a failure never. A change none of
those show fails the command closed: bwrap cannot make the namespaces, nothing runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sprawl_orch.core import served_memo
from sprawl_orch.core.arms import ArmName, linux_namespaces_assurances, user_namespace
from sprawl_orch.core.assurances import Assurances
from sprawl_orch.core.environment import host_side_env
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.guard_memo import served_guard
from sprawl_orch.core.host_which import host_which
from sprawl_orch.core.ownership import own_copy
from sprawl_orch.egress.plan import EgressPlan
from sprawl_orch.native_fallbacks import probe_memo
from sprawl_orch.native_fallbacks.bwrap_hold import Hold
from sprawl_orch.native_fallbacks.bwrap_masks import masks_for
from sprawl_orch.native_fallbacks.bwrap_view import View, command_view, system_view
from sprawl_orch.native_fallbacks.copied_tree import CopiedTreeArm
from sprawl_orch.native_fallbacks.probe import run_probe
from sprawl_orch.native_fallbacks.sandbox_uid import grant_search, sandbox_uid
from sprawl_orch.native_fallbacks.seccomp_filter import SeccompUnsupported, program_fd
from sprawl_orch.native_fallbacks.view_memo import served_path_part
from sprawl_orch.runs.launch import Launch, Running
from sprawl_orch.runs.process import HostProcess
from sprawl_orch.runs.yielding import Yielders, yield_prefix

NAMESPACE_FLAGS: tuple[str, ...] = (
    "--unshare-all",
    "--unshare-user",
    # No nested user namespace (bwrap >= 0.8 sets max_user_namespaces to 0 inside): inside
    # one a command gains every capability over its own mounts, kernel attack surface that
    # no claim needs (the escape suite found `unshare -Urm` working; sandbox-runtime and
    # Codex refuse nested namespaces too).
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)
PRIVATE_TMPFS: tuple[str, ...] = ("/tmp", "/var/tmp", "/run", "/dev/shm")
# bwrap 0.8 re-mounts bound mounts read-only one by one; a mount that disappears meanwhile
# (a container starting or stopping: docker's overlay2 .../merged under a bound directory)
# fails the setup with "Can't bind mount /oldroot/ on /newroot/: Unable to apply mount
# flags: remount ...: No such file or directory" (containers/bubblewrap#650, open).
# That is a race, not a refusal: the probe tries again before it calls the arm unusable.
MOUNT_RACE = "Unable to apply mount flags: remount"
PROBE_ATTEMPTS = 3


def _home_tmpfs(home: str | None, view: View) -> str | None:
    """A private tmpfs at $HOME, unless it is already private (HOME=/tmp: environment.py
    gives the sandbox arms that) or inside the read-only view."""
    if not home or not home.startswith("/") or home == "/" or view.covers(home):
        return None
    home = os.path.normpath(home)
    if any(home == p or home.startswith(p + "/") for p in PRIVATE_TMPFS):
        return None
    return home


def bwrap_argv(
    bwrap: str,
    view: View,
    copy: Path | str | None,
    workdir: Path | str,
    argv: Sequence[str],
    *,
    home: str | None = None,
    seccomp_fd: int | None = None,
    env_fd: int | None = None,
    masks: Sequence[str] = (),
) -> list[str]:
    """The wrapped command. Pure: the same inputs give the same list. `copy` None: nothing
    is mounted at `workdir` (the probe), the command still starts there. `env_fd`: the
    command's environment as bwrap arguments (env_args), read by bwrap from that fd.
    `masks`: paths inside the view covered by an empty read-only file (a secret's `file`
    under /etc or /opt was one `cat` away from the value)."""
    where = str(workdir)
    out = [bwrap, *NAMESPACE_FLAGS, "--dev", "/dev", "--proc", "/proc"]
    for place in PRIVATE_TMPFS:
        out += ["--tmpfs", place]
    out += ["--symlink", "../run", "/var/run"]
    private_home = _home_tmpfs(home, view)
    if private_home is not None:
        out += ["--tmpfs", private_home]
    for path in view.binds:
        out += ["--ro-bind", path, path]
    for target, path in view.links:
        out += ["--symlink", target, path]
    for path in masks:
        out += ["--ro-bind", "/dev/null", path]
    if copy is not None:
        out += ["--bind", str(copy), where]
    else:
        out += ["--dir", where]
    out += ["--chdir", where, "--remount-ro", "/"]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    if env_fd is not None:
        out += ["--args", str(env_fd)]
    out += ["--", *argv]
    return out


def env_args(env: Mapping[str, str]) -> bytes:
    """The command's environment as bwrap reads it from `--args FD`: cleared, then each name
    set. bwrap itself runs with host_side_env (issue 30: the command's LD_PRELOAD loaded into
    bwrap on the host). Through an fd, not argv: /proc/<pid>/cmdline is readable by every
    account on the host, a passed credential's value would be there."""
    words = ["--clearenv"]
    for name, value in env.items():
        words += ["--setenv", name, value]
    return b"".join(os.fsencode(w) + b"\0" for w in words)


def bundle_data(argv: list[str], plan: EgressPlan) -> tuple[list[str], int]:
    """Issue 25: the run's combined CA bundle as a read-only file at `plan.bundle_at` inside
    (bwrap copies it from a memfd into its private /run: no host path to bind, nothing the
    command can write). Placed before --chdir: after the --tmpfs /run it lands in."""
    assert plan.bundle is not None and plan.bundle_at is not None
    fd = os.memfd_create("sprawl-bundle", os.MFD_CLOEXEC)
    try:
        os.write(fd, plan.bundle.read_bytes())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    at = argv.index("--chdir")
    flags = ["--perms", "0444", "--ro-bind-data", str(fd), plan.bundle_at]
    return [*argv[:at], *flags, *argv[at:]], fd


def open_env_fd(env: Mapping[str, str]) -> int:
    """A fresh memfd holding env_args(env) at offset 0 (closed by the caller once started)."""
    fd = os.memfd_create("sprawl-env", os.MFD_CLOEXEC)
    try:
        os.write(fd, env_args(env))
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _true() -> str:
    # /bin/true on FHS systems; found on PATH where /bin is not populated (NixOS).
    return "/bin/true" if os.path.exists("/bin/true") else (host_which("true") or "/bin/true")


def drop_uid() -> int | None:
    """The uid bwrap is started as: ours for a root caller, None (the caller's) otherwise."""
    return sandbox_uid() if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def probe_argv(bwrap: str, workdir: Path | str, seccomp_fd: int | None = None) -> list[str]:
    """The probe: the same wrapper arguments over the system view, nothing bound at the
    working directory (no write, and a dropped uid need not reach the person's tree)."""
    return bwrap_argv(bwrap, system_view(), None, workdir, [_true()], seccomp_fd=seccomp_fd)


def _probe_once(bwrap: str, workdir: Path | str, user: int | None) -> tuple[bool, str]:
    try:
        fd = program_fd()
    except SeccompUnsupported as err:
        return False, f"no seccomp program for this machine: {err}"
    try:
        return run_probe(probe_argv(bwrap, workdir, fd), "bwrap", pass_fds=(fd,), user=user)
    finally:
        os.close(fd)


def probe(bwrap: str, workdir: Path | str, user: int | None = None) -> tuple[bool, str]:
    """The probe, tried again (up to PROBE_ATTEMPTS) only when it lost the mount-table race;
    a pass is kept by the exec server under all it depends on (probe_memo.py)."""
    view = system_view()
    seen: served_memo.Json = [list(view.binds), [list(link) for link in view.links]]
    the_key = probe_memo.key(bwrap, str(workdir), user, seen)
    return probe_memo.remembered(the_key, lambda: _probe_tries(bwrap, workdir, user))


def _probe_tries(bwrap: str, workdir: Path | str, user: int | None) -> tuple[bool, str]:
    ok, why = _probe_once(bwrap, workdir, user)
    for _ in range(PROBE_ATTEMPTS - 1):
        if ok or MOUNT_RACE not in why:
            break
        ok, why = _probe_once(bwrap, workdir, user)
    return ok, why


def user_namespace_works(bwrap: str) -> tuple[bool, str]:
    """Offerings' sample: can this bwrap (as the uid commands will use) make its namespaces?"""
    user = drop_uid()
    ok, why = probe(bwrap, "/", user)
    return ok, ("an unprivileged user namespace can be created" if ok else why)


class BwrapArm(CopiedTreeArm):
    name: ArmName = ArmName.LINUX_NAMESPACES
    egress_reach = (
        "a listener on 127.0.0.1 inside the command's network namespace (bwrap holds the "
        "command on --block-fd until it exists)"
    )

    def __init__(
        self,
        bwrap: str,
        yielders: Yielders,
        *,
        user: int | None = -1,
        places: Sequence[Path] = (),
        caller_home: str | None = None,
    ) -> None:
        """`user`: the uid bwrap runs as; -1 (default) chooses: ours for a root caller.
        `places`: sprawl-orch's own (state, scratch), never in the view; `caller_home`: the
        caller's $HOME (default: this process's), the view guard's reference."""
        super().__init__(yielders)
        self.bwrap = bwrap
        self.user = drop_uid() if user == -1 else user
        self._system = system_view()
        self._guard = served_guard(
            caller_home if caller_home is not None else os.environ.get("HOME"),
            places,
            self._system.binds,
            grants=self.user is not None,
        )

    def assurances(self) -> Assurances:
        return linux_namespaces_assurances(own_principal=self.user is not None)

    def note(self) -> str | None:
        view = (
            "Reads are limited to a read-only view: the system directories, the programs on "
            "PATH and the tree's virtualenv interpreters; /tmp, /run and $HOME are private "
            "and empty, and no unix socket can be created."
        )
        if self.user is not None:
            return (
                f"{view} The command runs as uid {self.user}, which no account holds; "
                "every sandboxed command of a root caller runs as it, each in namespaces "
                "of its own, seeing only its own copy."
            )
        return (
            f"{view} The user namespace maps the command onto your own uid: only a root "
            "caller can hand it a uid of its own."
        )

    def prepare(self, workdir: Path) -> None:
        # A pass is kept under the kernel's settings and bwrap's identity (probe_memo.py), a
        # failure never: and a namespace refused after a kept pass fails the command closed.
        ok, why = probe(self.bwrap, workdir, self.user)
        if ok:
            return
        missing = user_namespace(why)
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            subject="bwrap",
            detail="the linux_namespaces arm needs an unprivileged user namespace, and "
            f"{self.bwrap} could not make one here: {why}",
            recovery=missing.recovery,
        )

    def argv_for(
        self,
        argv: Sequence[str],
        copy: Path,
        workdir: Path,
        env: Mapping[str, str],
        seccomp_fd: int | None,
        env_fd: int | None = None,
        hidden: Sequence[str] = (),
    ) -> list[str]:
        view = command_view(env, workdir, copy, self._system, self._guard, served_path_part)
        if self.user is not None:
            self.give(copy, view)
        return bwrap_argv(
            self.bwrap,
            view,
            copy,
            workdir,
            argv,
            home=env.get("HOME"),
            seccomp_fd=seccomp_fd,
            env_fd=env_fd,
            masks=masks_for(view, hidden, self.user),
        )

    def give(self, copy: Path, view: View) -> None:
        """The copy to our uid, and the way to it and to the view's directories."""
        assert self.user is not None
        own_copy(copy, self.user, self.user)
        grant_search(copy, self.user, *(Path(p) for p in view.binds))

    def start(self, launch: Launch) -> Running:
        workdir = launch.workdir or launch.cwd
        try:
            fd = program_fd()
        except SeccompUnsupported as err:
            raise SprawlError(
                ErrorCode.SANDBOX_DENIED,
                "bwrap",
                f"no seccomp program for this machine: {err}",
                'use a container arm, or ask for arm = "copied_tree"',
            ) from err
        hold = Hold() if launch.egress is not None else None
        fds = [fd]
        try:
            fds.append(open_env_fd(launch.env))
            hidden = launch.egress.hidden if launch.egress is not None else ()
            argv = self.argv_for(launch.argv, launch.cwd, workdir, launch.env, fd, fds[1], hidden)
            if launch.egress is not None and launch.egress.bundle_at is not None:
                argv, bundle_fd = bundle_data(argv, launch.egress)
                fds.append(bundle_fd)
            if hold is not None:
                argv = argv[:1] + hold.flags() + argv[1:]
            # The command's environment goes in through the fd; what runs on the host (the
            # gate's sh, ionice, nice, bwrap) gets ours.
            process = HostProcess(
                yield_prefix(self.yielders) + argv,
                launch.cwd,
                host_side_env(),
                launch.outputs,
                join=launch.join,
                watcher=launch.watcher,
                pass_fds=(*fds, *(hold.fds() if hold else ())),
                user=self.user,
                given=launch.given,
            )
        finally:
            for each in fds:
                with contextlib.suppress(OSError):
                    os.close(each)
            if hold is not None:
                hold.close_theirs()
        if hold is None or launch.egress is None:
            return process
        return hold.release(process, launch.egress)
