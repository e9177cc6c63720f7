"""Create one container for a command and verify it before it starts (design §3): own the
copy for the container user -> build the create argv (pure) -> create through the engine CLI,
the child's env by --env-file -> inspect and verify (mismatch: remove, refuse) -> give the copy
to the command's host uid. ContainerArm.create_verified (container/arm.py) is this, for the
cold start and the warm pool alike.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sprawl_orch.container.admitted import Admission
from sprawl_orch.container.argv import Limits, container_name, create_argv, fit_limits
from sprawl_orch.container.command import (
    command_env,
    remove_quietly,
    start_refusal,
    write_env_file,
)
from sprawl_orch.container.ownership import give_copy
from sprawl_orch.container.run import image_path
from sprawl_orch.container.userns import host_owner, principal_problem
from sprawl_orch.container.verify import Expected, as_command_user, verify
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.launch import Launch

if TYPE_CHECKING:
    from pathlib import Path

    from sprawl_orch.config import ContainerConfig
    from sprawl_orch.container.argv import HostLimits
    from sprawl_orch.engines.engine import ContainerEngine


class ContainerArmLike(Protocol):
    """What creating needs of the arm (ContainerArm; named here, not imported: the arm
    imports this module)."""

    config: ContainerConfig

    @property
    def host(self) -> HostLimits: ...

    @property
    def engine(self) -> ContainerEngine: ...

    def admission(self) -> Admission: ...

    def userns_flags(self, admission: Admission, copy: Path) -> tuple[str, ...]: ...

    def left_copy(self, copy: Path) -> None: ...

    def take_given(self, copy: Path) -> tuple[int, int] | None: ...


def _limits(limits: Limits) -> dict[str, object]:
    """The numbers a result's statement names when the kernel enforced one of them."""
    return {"memory_bytes": limits.memory_bytes, "pids": limits.pids, "cpus": limits.cpus}


def create_verified(
    arm: ContainerArmLike,
    launch: Launch,
    command: Sequence[str],
    *,
    init_user: str | None = None,
    venv: str | None = None,
    read_only: tuple[tuple[str, str], ...] = (),
    entrypoint: str | None = None,
) -> tuple[str, str, dict[str, object]]:
    """Create the container for `launch` running `command`, inspect and verify it (a
    mismatch: removed, refused), give the copy to the command's host uid. Returns (id,
    name, record). `init_user`: the container's own user when it is not the command's
    (a warm container's idle init, warm.py); each exec then names the command's user."""
    admission = arm.admission()
    if not admission.admitted:
        raise admission.error()
    assert admission.image is not None and admission.runtime_used is not None
    engine = arm.engine
    copy = launch.cwd.resolve()
    config = arm.config if init_user is None else arm.config.model_copy(update={"user": init_user})
    env = command_env(launch)
    launch.outputs.mkdir(parents=True, exist_ok=True)
    env_file = launch.outputs / f"create-{secrets.token_hex(4)}.env"
    argv = create_argv(
        engine.name,
        config,
        admission.image,
        copy,
        command,
        env.keys(),
        launch.tag,
        launch.session,
        launch.run,
        admission.runtime,
        host=arm.host,
        userns=arm.userns_flags(admission, copy),  # counts this container in
        workdir=launch.workdir,
        limits=admission.limits_enforced,
        gvisor=admission.gvisor,
        seccomp=admission.seccomp,
        read_only=read_only,
        entrypoint=entrypoint,
        env_file=env_file,
        # -t alone too: the terminal is the command's stdin on every arm (docker's own
        # -t without -i leaves it /dev/null, and `stty` fails)
        stdin_open=launch.given is not None,
        tty=launch.given is not None and launch.given.tty,
    )
    name = container_name(launch.tag)
    record: dict[str, object] = {
        "engine": engine.name,
        "image": admission.image,
        "argv": list(engine.cli_argv(argv)),
        "verified": False,
        "removed": False,
        "runtime": admission.runtime_used,
        "name": name,
        "limits": _limits(fit_limits(arm.config, arm.host)),
        "kernel": "gvisor" if admission.gvisor else "host",
    }
    launch.outputs.mkdir(parents=True, exist_ok=True)
    launch.watcher.expect(name)
    try:
        # The CLI runs with the engine's connection only; the values go in the file.
        write_env_file(env, env_file)
        try:
            container = engine.create(argv)
        finally:
            env_file.unlink(missing_ok=True)
    except SprawlError as err:
        arm.left_copy(copy)
        remove_quietly(engine, name, launch)
        raise start_refusal(err.detail, command[0], err, venv) from err
    launch.watcher.created(name, container)
    try:
        expected = Expected.of(
            engine.name,
            arm.config,
            arm.host,
            admission.image,
            copy,
            admission.runtime_used,
            admission.userns,
            workdir=launch.workdir,
            enforced=admission.limits_enforced,
            gvisor=admission.gvisor,
            seccomp=admission.seccomp,
            read_only=read_only,
        )
        inspect = engine.inspect(container)
        if init_user is not None:
            inspect = as_command_user(inspect, init_user, expected.user)
        verify(expected, inspect)
        # the copy goes to the host uid the command's uid is: with podman's
        # --userns=auto that is known only now, from the container's own map
        owner = _owner(arm, admission, inspect)
        # ready_copy gave this copy to this owner a moment ago in this call, and nothing
        # but our read-only stamp walk touched it since (the copy's lease is ours alone)
        if arm.take_given(copy) != owner:
            user = fit_limits(arm.config, arm.host).uid_gid
            give_copy(engine, admission.userns, copy, owner, user)
    except SprawlError as err:
        arm.left_copy(copy)
        left = remove_quietly(engine, container, launch, name)
        if left:
            raise SprawlError(err.code, err.subject, f"{err.detail}; {left}", err.recovery) from err
        raise
    record |= {
        "verified": True,
        "id": container,
        "host_owner": f"{owner[0]}:{owner[1]}",
        "path": image_path(inspect),
    }
    if admission.userns is not None:
        record["userns"] = admission.userns.mode
    return container, name, record


def _owner(arm: ContainerArmLike, admission: Admission, inspect: dict[str, Any]) -> tuple[int, int]:
    """The host uid:gid of the command; refused when the user axis is claimed and the
    map puts the command on a host principal (root, the caller, a passwd account)."""
    uid, gid = fit_limits(arm.config, arm.host).uid_gid
    if admission.userns is None:
        return uid, gid
    try:
        owner = host_owner(admission.userns, uid, gid, inspect)
    except ValueError as err:
        owner, problem = (uid, gid), str(err)
    else:
        problem = principal_problem(owner[0]) or ""
    if problem:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            "userns",
            f"{problem}; the user axis would not hold, so it was removed without starting",
            "check the subordinate ranges in /etc/subuid and /etc/subgid "
            "(`sprawl-orch doctor` shows the map)",
        )
    return owner
