"""`ContainerArm`: the Arm protocol over an admitted engine (design §3).

Per command: own the copy for the container user -> build the create argv (pure) ->
create through the engine CLI with the child's env -> inspect and verify (mismatch:
remove, refuse) -> start. The guardian hears the container's name before the create,
its ID after it, and "gone" after removal (`Launch.watcher`).

An admission read from kept evidence (container/evidence.py) skipped the probe container.
If the engine then fails a real command -- the create, the verification before start, or
the start -- the evidence is dropped, the engine admitted again (probe included), and the
command tried once more only if that admission passes.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.admission import (
    Admission,
    admit,
    admit_each,
    engine_for,
    preferred,
)
from sprawl_orch.container.argv import (
    HostLimits,
    Limits,
    container_name,
    create_argv,
    fit_limits,
)
from sprawl_orch.container.command import (
    command_env,
    command_venv,
    remove_quietly,
    start_refusal,
    write_env_file,
)
from sprawl_orch.container.egress_hold import (
    Held,
    egress_gap,
    init_pid,
    proxy_at,
    reach,
    warm_start,
)
from sprawl_orch.container.evidence import Evidence
from sprawl_orch.container.gvisor import gvisor_note
from sprawl_orch.container.ownership import give_copy, given_away, take_back
from sprawl_orch.container.run import ContainerRun, image_path
from sprawl_orch.container.userns import Userns, host_owner, principal_problem
from sprawl_orch.container.verify import Expected, as_command_user, verify
from sprawl_orch.core.arms import ArmName, container_assurances
from sprawl_orch.core.assurances import Assurances
from sprawl_orch.core.engine_offer import EngineOffer
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.runs.launch import Launch, Running, Watcher

if TYPE_CHECKING:
    from sprawl_orch.container.warm import WarmPool
    from sprawl_orch.egress.plan import EgressPlan
    from sprawl_orch.egress.proxy import EgressProxy

SHELL = "/bin/sh"  # a shell line runs under the image's own shell


def _limits(limits: Limits) -> dict[str, object]:
    """The numbers a result's statement names when the kernel enforced one of them."""
    return {"memory_bytes": limits.memory_bytes, "pids": limits.pids, "cpus": limits.cpus}


class ContainerArm:
    name = ArmName.CONTAINER

    def __init__(
        self,
        config: ContainerConfig,
        engine: ContainerEngine | None = None,
        *,
        host: HostLimits | None = None,
        evidence: Evidence | None = None,
        watcher: Watcher | None = None,
    ) -> None:
        self.config = config
        self._engine = engine
        self._host = host
        self._admission: Admission | None = None
        self._warm: WarmPool | None = None
        self.evidence = evidence
        self.watcher = watcher
        self.readmitted = False
        # Containers of this arm on each copy now (podman --userns=auto: only while one
        # holds the copy's range may another command take that range explicitly).
        self._on_copy: dict[Path, int] = {}
        self._on_copy_lock = threading.Lock()

    @classmethod
    def from_offer(
        cls,
        offer: EngineOffer,
        config: ContainerConfig,
        *,
        evidence: Evidence | None = None,
        watcher: Watcher | None = None,
    ) -> ContainerArm:
        return cls(
            config, engine_for(offer.engine, config.docker_host), evidence=evidence, watcher=watcher
        )

    @property
    def host(self) -> HostLimits:
        if self._host is None:
            self._host = HostLimits.this_host()
        return self._host

    @property
    def engine(self) -> ContainerEngine:
        self.admission()
        assert self._engine is not None
        return self._engine

    def admission(self) -> Admission:
        if self._admission is None:
            if self._engine is None:
                # engine = "auto" (or the configured name): first admitted of docker, podman
                tried = admit_each(self.config, evidence=self.evidence, watcher=self.watcher)
                self._engine, self._admission = preferred(tried) or tried[-1]
                if not self._admission.admitted and len(tried) > 1:
                    reasons = "; ".join(a.summary() for _, a in tried)
                    self._admission = Admission(
                        "auto",
                        False,
                        code=ErrorCode.TOOL_UNAVAILABLE,
                        reason=reasons,
                        recovery="; ".join(dict.fromkeys(a.recovery for _, a in tried)),
                    )
            else:
                self._admission = admit(
                    self._engine,
                    self.config,
                    self.host,
                    evidence=self.evidence,
                    watcher=self.watcher,
                )
        return self._admission

    def assurances(self) -> Assurances:
        admission = self.admission()
        return container_assurances(
            admission.admitted and admission.uids_namespaced,
            not admission.admitted or admission.limits_enforced,
        )

    def note(self) -> str | None:
        admission = self.admission()
        if not admission.admitted:
            return None
        kept = "kept" if admission.uids_namespaced else "not kept"
        said = f"User axis {kept}: {admission.userns_why}."
        if self.config.warm:
            from sprawl_orch.container.warm import WARM_NOTE

            said = f"{said} {WARM_NOTE}"
        if not admission.limits_enforced:
            said += f" Resources not kept: {admission.limits_why}."
        if admission.gvisor:
            said += f" {gvisor_note()}"
        return said

    @property
    def egress_gap(self) -> str | None:
        """Why this arm's commands cannot have an allow-list, or None when they can."""
        return egress_gap(self.admission(), self.engine.name, self.config.warm)

    @property
    def egress_reach(self) -> str | None:
        return reach(self.engine.name, self.config.warm) if self.egress_gap is None else None

    def prepare(self, workdir: Path) -> None:
        admission = self.admission()
        if not admission.admitted:
            raise admission.error()
        if self.config.warm:
            from sprawl_orch.container.warm import rootless_refusal

            refused = rootless_refusal(admission.userns)
            if refused is not None:
                raise refused

    def ready_copy(self, copy: Path) -> bool:
        """Give the synced copy to the container user now, before the exec tool records the
        copy's stamps for `changes` (lchown sets every ctime; start() then finds nothing to do).
        True if entries were re-owned (the sync's stamps of them no longer hold).
        A fixed map (docker userns-remap, rootless) names the host owner now; with podman
        --userns=auto it is known only from the created container's map (_owner): nothing
        here, so the copy is not chowned twice; `changes` then compares the bytes of what
        start() re-owned (exact, slower). A rootless caller gives it away only at start too
        (ownership.given_away): the stamps are read by the caller, who can't once it's given."""
        admission = self.admission()
        user = fit_limits(self.config, self.host).uid_gid
        userns = admission.userns if admission.admitted else None
        if userns is not None and (userns.uid_map is None or given_away(userns)):
            return False
        return give_copy(
            self.engine if admission.admitted else None,
            userns,
            copy.resolve(),
            host_owner(userns, *user, {}),
            user,
        )

    def start(self, launch: Launch) -> Running:
        try:
            return self._start(launch)
        except SprawlError as err:
            admission = self.admission()
            engine_failed = err.code in (ErrorCode.ENGINE_REFUSED, ErrorCode.SANDBOX_DENIED)
            if not (engine_failed and admission.proved_at is not None and not self.readmitted):
                raise
            # Kept evidence said yes, the engine says no: prove it again, once.
            self.readmitted = True
            self._admission = admit(
                self.engine,
                self.config,
                self.host,
                evidence=self.evidence,
                watcher=self.watcher or launch.watcher,
                fresh=True,
            )
            if not self._admission.admitted:
                raise self._admission.error() from err
            return self._start(launch)

    def _start(self, launch: Launch) -> Running:
        command = (SHELL, "-c", launch.shell_line) if launch.shell_line is not None else launch.argv
        if self.config.warm:
            return warm_start(self.warm_pool(), launch, command)
        engine = self.engine
        venv = command_venv(launch, command)
        held = Held.of(launch, engine.name, self.egress_gap)
        try:
            container, name, record = self.create_verified(
                launch,
                held.command(command),
                venv=venv,
                read_only=held.read_only,
                entrypoint=held.entrypoint,
            )
        except BaseException:
            held.close()
            raise
        proxy = None
        if held.plan is not None and held.gate is None:  # podman: init, bind, then start
            proxy = self._egress(engine, container, launch, name, held.plan)
        attached = engine.start(container, launch.outputs / "stdout", launch.outputs / "stderr")
        if attached.start_error is not None:
            held.close(proxy)
            attached.collect()
            self.left_copy(launch.cwd.resolve())
            remove_quietly(engine, container, launch, name)
            raise start_refusal(attached.start_error, command[0], None, venv)
        userns, copy = self.admission().userns, launch.cwd.resolve()
        run = ContainerRun(
            engine,
            container,
            name,
            launch,
            attached,
            record,
            venv,
            after=lambda: self._after_run(engine, userns, copy),
        )
        if held.plan is not None and held.gate is not None:  # docker: started, held at the gate
            try:
                proxy = proxy_at(held.plan, int(engine.inspect(container)["State"]["Pid"]))
            except BaseException:
                held.close()  # EOF at the gate: the program never runs
                run.wait(None)
                run.finish()
                raise
            held.gate.open()
        if proxy is None:
            return run
        from sprawl_orch.runs.proxied import ProxiedRunning

        return ProxiedRunning(run, proxy, after=held.close)

    def _egress(
        self, engine: ContainerEngine, container: str, launch: Launch, name: str, plan: EgressPlan
    ) -> EgressProxy:
        """podman: the proxy serving a listener inside the initialised, not yet started,
        container; on failure the container is removed and the command refused unrun."""
        try:
            return proxy_at(plan, init_pid(engine, container))
        except BaseException:
            self.left_copy(launch.cwd.resolve())
            remove_quietly(engine, container, launch, name)
            raise

    def _after_run(self, engine: ContainerEngine, userns: Userns | None, copy: Path) -> None:
        self.left_copy(copy)
        take_back(engine, userns, copy)

    def create_verified(
        self,
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
        admission = self.admission()
        if not admission.admitted:
            raise admission.error()
        assert admission.image is not None and admission.runtime_used is not None
        engine = self.engine
        copy = launch.cwd.resolve()
        config = (
            self.config if init_user is None else self.config.model_copy(update={"user": init_user})
        )
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
            host=self.host,
            userns=self._userns_flags(admission, copy),  # counts this container in
            workdir=launch.workdir,
            limits=admission.limits_enforced,
            gvisor=admission.gvisor,
            seccomp=admission.seccomp,
            read_only=read_only,
            entrypoint=entrypoint,
            env_file=env_file,
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
            "limits": _limits(fit_limits(self.config, self.host)),
            "kernel": "gvisor" if admission.gvisor else "host",
        }
        launch.outputs.mkdir(parents=True, exist_ok=True)
        launch.watcher.expect(name)
        try:
            # The CLI runs with the engine's connection only; the values go in the file.
            write_env_file(env, env_file)
            try:
                container = engine.create(argv, {})
            finally:
                env_file.unlink(missing_ok=True)
        except SprawlError as err:
            self.left_copy(copy)
            remove_quietly(engine, name, launch)
            raise start_refusal(err.detail, command[0], err, venv) from err
        launch.watcher.created(name, container)
        try:
            expected = Expected.of(
                engine.name,
                self.config,
                self.host,
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
            owner = self._owner(admission, inspect)
            give_copy(
                engine, admission.userns, copy, owner, fit_limits(self.config, self.host).uid_gid
            )
        except SprawlError as err:
            self.left_copy(copy)
            left = remove_quietly(engine, container, launch, name)
            if left:
                raise SprawlError(
                    err.code, err.subject, f"{err.detail}; {left}", err.recovery
                ) from err
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

    def warm_pool(self) -> WarmPool:
        if self._warm is None:
            from sprawl_orch.container.warm import WarmPool

            self._warm = WarmPool(self)
        return self._warm

    def _userns_flags(self, admission: Admission, copy: Path) -> tuple[str, ...]:
        """The userns flags of a new container on `copy`, which is counted in (left_copy
        counts it out). The copy's owner range is named explicitly only while another
        container of this arm holds it: once that one is gone, podman may give the range
        to another copy's command, and naming it then would run two copies' commands as
        one host uid (tests/escapes/test_userns_share.py)."""
        with self._on_copy_lock:
            shared = self._on_copy.get(copy, 0) > 0
            self._on_copy[copy] = self._on_copy.get(copy, 0) + 1
        if admission.userns is None:
            return ()
        uid, gid = fit_limits(self.config, self.host).uid_gid
        if not shared:
            return admission.userns.flags(user=(uid, gid))
        st = copy.stat()
        return admission.userns.flags(owner=(st.st_uid, st.st_gid), user=(uid, gid))

    def left_copy(self, copy: Path) -> None:
        """A container counted in by _userns_flags is gone (or was never made)."""
        with self._on_copy_lock:
            left = self._on_copy.get(copy, 0) - 1
            if left > 0:
                self._on_copy[copy] = left
            else:
                self._on_copy.pop(copy, None)

    def _owner(self, admission: Admission, inspect: dict[str, Any]) -> tuple[int, int]:
        """The host uid:gid of the command; refused when the user axis is claimed and the
        map puts the command on a host principal (root, the caller, a passwd account)."""
        uid, gid = fit_limits(self.config, self.host).uid_gid
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

    def close(self) -> None:
        if self._warm is not None:
            self._warm.close()
        if self._engine is not None:
            self._engine.close()
