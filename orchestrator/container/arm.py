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

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.admission import admit, admit_each, admitted_engine, preferred
from sprawl_orch.container.admitted import Admission
from sprawl_orch.container.argv import (
    HostLimits,
    fit_limits,
)
from sprawl_orch.container.command import (
    command_venv,
    remove_quietly,
    start_refusal,
)
from sprawl_orch.container.create import create_verified
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
from sprawl_orch.container.run import ContainerRun
from sprawl_orch.container.userns import Userns, host_owner
from sprawl_orch.core import served_warm
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
        # copy -> the host owner ready_copy gave it to, taken by the create that follows
        # (container/create.py): its own whole-copy walk found nothing to re-own, and cost
        # ~50-170 ms a call on a 10 000-file tree (benchmarks/cli_profile.py)
        self._given: dict[Path, tuple[int, int]] = {}

    @classmethod
    def from_offer(
        cls,
        offer: EngineOffer,
        config: ContainerConfig,
        *,
        evidence: Evidence | None = None,
        watcher: Watcher | None = None,
    ) -> ContainerArm:
        engine = admitted_engine(offer.engine, config.docker_host)
        return cls(config, engine, evidence=evidence, watcher=watcher)

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

    def image_trust_store(self) -> bytes | None:
        """The CA certificates the admitted image trusts (container/image_cas.py), read once
        per image; None for an engine sprawl-orch does not drive itself (a test's double)."""
        from sprawl_orch.container.image_cas import image_cas
        from sprawl_orch.engines.docker import DockerEngine
        from sprawl_orch.engines.podman import PodmanEngine

        admission = self.admission()
        engine = self.engine
        if admission.image is None or not isinstance(engine, (DockerEngine, PodmanEngine)):
            return None
        return image_cas(engine, admission.image)

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
        self.take_given(copy.resolve())  # an earlier call's, never this one's to trust
        admission = self.admission()
        user = fit_limits(self.config, self.host).uid_gid
        userns = admission.userns if admission.admitted else None
        if userns is not None and (userns.uid_map is None or given_away(userns)):
            return False
        owner = host_owner(userns, *user, {})
        changed = give_copy(
            self.engine if admission.admitted else None, userns, copy.resolve(), owner, user
        )
        with self._on_copy_lock:
            self._given[copy.resolve()] = owner
        return changed

    def take_given(self, copy: Path) -> tuple[int, int] | None:
        """The owner ready_copy just gave `copy` to (once), or None: the caller walks."""
        with self._on_copy_lock:
            return self._given.pop(copy, None)

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
        if self.config.warm and launch.given is None:
            # -i/-t run cold: a warm exec has no stdin or terminal of its own yet (issue 26)
            return warm_start(self.warm_pool(), launch, command)
        served_warm.keep_only(None)  # a cold command holds no kept container's owner
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
        attached = engine.start(
            container, launch.outputs / "stdout", launch.outputs / "stderr", launch.given
        )
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
                # Not run.finish(): it reads outputs/stderr for a refusal, and before the arm
                # has returned that name is still the output pump's FIFO, whose reader holds
                # a write end of its own -- the read never ended (a docker command whose
                # proxy listener failed hung there). Cleaned up as a refused start is above.
                attached.collect()
                self.left_copy(launch.cwd.resolve())
                remove_quietly(engine, container, launch, name)
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
        """Create the container for `launch` running `command`, verified, the copy given to
        the command's host uid: (id, name, record). container/create.py says how."""
        return create_verified(
            self,
            launch,
            command,
            init_user=init_user,
            venv=venv,
            read_only=read_only,
            entrypoint=entrypoint,
        )

    def warm_pool(self) -> WarmPool:
        if self._warm is None:
            if served_warm.served():
                # a call of the exec server: idle containers wait in the server (issue 26)
                from sprawl_orch.container.warm_served import ServedWarmPool

                self._warm = ServedWarmPool(self)
            else:
                from sprawl_orch.container.warm import WarmPool

                self._warm = WarmPool(self)
        return self._warm

    def userns_flags(self, admission: Admission, copy: Path) -> tuple[str, ...]:
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

    def close(self) -> None:
        if self._warm is not None:
            self._warm.close()
        if self._engine is not None:
            self._engine.close()
