"""Admission's probe container (design §3.1 step 3): `true` run exactly as a command runs.

Create with the configured limits and runtime, inspect-verify, give the copy to the
command's uid, start, read the state, remove. This catches runtimes that accept a flag
and then fail to apply it (crun on a hybrid cgroup host; rlimits above the host's hard
limit; runsc refusing the root network namespace). Under a user namespace the probe
`touch`es a file and reads its owner back from the host.

The probe container and its directory are announced to the guardian (`watcher`) before
they exist, like every command's: a process killed mid-probe leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits, container_name, create_argv, fit_limits
from sprawl_orch.container.ownership import give_copy, take_back
from sprawl_orch.container.stale_probes import PROBE_SESSION, owner_label
from sprawl_orch.container.userns import Userns, host_owner, principal_problem
from sprawl_orch.container.verify import Expected, mismatches
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.removal import delete_quietly
from sprawl_orch.engines.engine import ZERO_TIME, ContainerEngine
from sprawl_orch.runs.launch import NullWatcher, Watcher

PROBE_TIMEOUT = 60.0
# Under a user namespace the probe creates this file in its copy: its owner, read from
# the host, must be the uid admission computed (else the copy could not be written).
PROBE_FILE = "sprawl-probe"


@dataclass(frozen=True)
class Runtime:
    """An OCI runtime to run containers under, as the create and the inspect spell it."""

    name: str  # runc, crun, runsc, or the engine's default runtime's name
    flag: str | None  # what --runtime gets; None = the engine's default
    expect: str  # what inspect reports (HostConfig.Runtime / OCIRuntime)
    gvisor: bool = False  # the command runs on gVisor's kernel, not the host's

    @classmethod
    def default(cls, name: str) -> Runtime:
        return cls(name, None, name, name == "runsc")


def _state_failure(state: dict[str, object]) -> str | None:
    if str(state.get("StartedAt", "")).startswith(ZERO_TIME):
        return str(state.get("Error") or "the container never started")
    if state.get("ExitCode") != 0:
        code, error = state.get("ExitCode"), state.get("Error") or ""
        return f"the probe command exited with {code}: {error}".strip()
    return None


def _probe_dir(watcher: Watcher) -> Path:
    """Like mkdtemp (0700, unguessable, O_EXCL-style), but the name is told to the guardian
    before the directory exists (the guardian deletes only `sprawl-` names)."""
    while True:
        work = Path(tempfile.gettempdir()) / f"sprawl-probe-{secrets.token_hex(6)}"
        watcher.scratch(work)
        try:
            os.mkdir(work, 0o700)
        except FileExistsError:
            continue
        return work


def _remove_probe(engine: ContainerEngine, ref: str, name: str, watcher: Watcher) -> None:
    # one we cannot remove (engine down) stays announced: the guardian or the next
    # admission (stale_probes) removes it
    with contextlib.suppress(SprawlError):
        engine.remove(ref)
        watcher.gone(name)


class _OwnFault(Exception):
    """The copy could not be given to the container's uid: our fault, not the engine's."""

    def __init__(self, err: SprawlError) -> None:
        super().__init__(err.detail)
        self.err = err


def probe(
    engine: ContainerEngine,
    config: ContainerConfig,
    image: str,
    runtime: Runtime,
    host: HostLimits,
    watcher: Watcher | None = None,
    userns: Userns | None = None,
    limits: bool = True,
    seccomp: str | None = None,
) -> str | None:
    """Run `true` exactly as a command would run (limits, mount, verify) — under a user
    namespace `touch` a file and read its owner back from the host. None = passed, else
    the engine's words. Our own faults (the copy can't be given to the user, the limits
    don't fit) raise SprawlError with their own recovery instead."""
    watcher = watcher or NullWatcher()
    work = _probe_dir(watcher)
    tag = f"probe-{secrets.token_hex(4)}"
    name = container_name(tag)
    command = ["true"] if userns is None else ["touch", PROBE_FILE]
    try:
        (work / "copy").mkdir()
        argv = create_argv(
            engine.name,
            config,
            image,
            work / "copy",
            command,
            [],
            tag,
            PROBE_SESSION,
            owner_label(),
            runtime.flag,
            host=host,
            userns=userns.flags() if userns else (),
            limits=limits,
            gvisor=runtime.gvisor,
            seccomp=seccomp,
        )
        try:
            return _run_probe(
                engine,
                config,
                image,
                runtime,
                host,
                argv,
                name,
                work,
                watcher,
                userns,
                limits,
                seccomp,
            )
        except _OwnFault as fault:
            raise fault.err from None
    finally:
        with contextlib.suppress(SprawlError):
            take_back(engine, userns, work / "copy")
        delete_quietly(work)
        if not work.exists():
            watcher.scratch_gone(work)


def _run_probe(
    engine: ContainerEngine,
    config: ContainerConfig,
    image: str,
    runtime: Runtime,
    host: HostLimits,
    argv: tuple[str, ...],
    name: str,
    work: Path,
    watcher: Watcher,
    userns: Userns | None,
    limits: bool,
    seccomp: str | None,
) -> str | None:
    copy = work / "copy"
    container: str | None = None
    watcher.expect(name)
    try:
        try:
            container = engine.create(argv)
        except SprawlError:
            _remove_probe(engine, name, name, watcher)  # a create that failed late may exist
            raise
        watcher.created(name, container)
        expected = Expected.of(
            engine.name,
            config,
            host,
            image,
            copy,
            runtime.expect,
            userns,
            enforced=limits,
            gvisor=runtime.gvisor,
            seccomp=seccomp,
        )
        inspect = engine.inspect(container)
        found = mismatches(expected, inspect)
        if found:
            return "inspect differs from what was asked: " + "; ".join(m.text() for m in found)
        # the copy goes to the host uid the command's uid is (with podman's
        # --userns=auto known only now, from the container's own map)
        user = fit_limits(config, host).uid_gid
        owner = host_owner(userns, *user, inspect)
        if userns is not None and (problem := principal_problem(owner[0])):
            return problem
        try:
            give_copy(engine, userns, copy, owner, user)
        except SprawlError as err:
            raise _OwnFault(err) from err
        attached = engine.start(container, work / "stdout", work / "stderr")
        if not attached.wait(PROBE_TIMEOUT):
            return f"the probe command did not finish within {PROBE_TIMEOUT:g} s"
        start_error = attached.collect()
        failure = _state_failure(engine.inspect(container).get("State") or {})
        if failure is None:
            return None if userns is None else _owned_as(copy / PROBE_FILE, owner)
        stderr = (work / "stderr").read_text(errors="replace").strip()
        return start_error or stderr or failure
    except SprawlError as err:
        return err.detail
    finally:
        if container is not None:
            _remove_probe(engine, container, name, watcher)


def _owned_as(made: Path, owner: tuple[int, int]) -> str | None:
    try:
        st = made.lstat()
    except OSError as err:
        return f"the probe's `touch {made.name}` left no file in the copy: {err.strerror}"
    if (st.st_uid, st.st_gid) != owner:
        return (
            f"the probe's file is owned by {st.st_uid}:{st.st_gid} on the host, not by "
            f"the mapped {owner[0]}:{owner[1]}"
        )
    return None
