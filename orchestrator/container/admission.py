"""Daemon admission (design §3.1): an engine is admitted only by evidence from the engine.

Steps, each refusing with the engine's own words and a recovery:
1. connect and read facts (version, OS/arch, cgroup version/driver, limit support,
   rootless/userns) — a CLI on PATH or `docker --version` is no evidence;
2. the pinned image is present locally by its fixed ID (never pulled);
3. a probe container (probe_container.py) with the configured limits under the runtime
   `[sandbox.container] runtime` asks for (runtimes.py: gVisor's runsc, the engine's
   default, or a fallback that passes -- said in the notes).
Results are cached once per process per (engine, endpoint, config), and a passed admission
is kept on disk while the engine's identity holds (container/evidence.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sprawl_orch.config import Config, ContainerConfig
from sprawl_orch.container import runtimes
from sprawl_orch.container.admission_words import explain, userns_failure
from sprawl_orch.container.admitted import KEPT, Admission, refused
from sprawl_orch.container.argv import HostLimits, fit_limits
from sprawl_orch.container.evidence import Evidence, boot_id
from sprawl_orch.container.gvisor import ensure_wrapper, runsc_path
from sprawl_orch.container.probe_container import Runtime, probe
from sprawl_orch.container.seccomp_profile import ProfileUnusable, file_holds, write_for
from sprawl_orch.container.stale_probes import sweep_stale_probes
from sprawl_orch.container.userns import SUBGID, SUBUID, Userns, plan
from sprawl_orch.core import arms
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.backends import backend
from sprawl_orch.engines.engine import ENGINES, ContainerEngine, stamp
from sprawl_orch.runs.launch import NullWatcher, Watcher


def _admit(
    engine: ContainerEngine,
    config: ContainerConfig,
    host: HostLimits,
    watcher: Watcher,
    wrappers: Path,
) -> Admission:
    name = engine.name
    try:
        facts = engine.facts()
    except SprawlError as err:
        reason, recovery = explain(name, "", err.detail, config, host)
        if err.code is ErrorCode.TOOL_UNAVAILABLE:
            reason, recovery = err.detail, err.recovery
        return refused(name, ErrorCode.TOOL_UNAVAILABLE, reason, recovery)
    if facts.os != "linux":
        return refused(
            name,
            ErrorCode.TOOL_UNAVAILABLE,
            f"{name} serves {facts.os} containers",
            "switch the engine to Linux containers",
        )
    unsupported = facts.unsupported_limits()
    # a rootless engine without the controllers runs, limits unasked and resources = no,
    # once its probe shows it drops them (below); a rootful one is refused
    if unsupported and not facts.rootless:
        return refused(
            name,
            ErrorCode.SANDBOX_DENIED,
            f"{name} reports no support for {', '.join(unsupported)} limits "
            f"(cgroup v{facts.cgroup_version}, {facts.cgroup_driver})",
            "enable the cgroup controllers (cgroup v2 delegation for rootless engines)",
        )
    image = config.image_for(name)
    if image is None or engine.local_image(image) is None:
        missing = arms.image_not_local(name, image)
        return refused(name, ErrorCode.TOOL_UNAVAILABLE, missing.phrase, missing.recovery, missing)
    try:
        limits = fit_limits(config, host)
    except SprawlError as err:
        return refused(
            name,
            err.code,
            err.detail,
            err.recovery,
            arms.config_invalid(err.subject, err.detail, err.recovery),
        )
    asked = config.userns
    wanted, why_not = plan(
        name,
        facts.rootless,
        facts.userns_remap,
        facts.root_dir,
        facts.uid_map,
        facts.gid_map,
        asked,
    )
    if wanted is None and asked == "required":
        return refused(
            name,
            ErrorCode.SANDBOX_DENIED,
            f'[sandbox.container] userns = "required", but {name} gives no user namespace: '
            f"{why_not}",
            'use an engine that does (podman with /etc/subuid ranges for "containers", a '
            'dockerd with --userns-remap, a rootless engine) or set userns = "auto"',
        )
    enforced, limits_why = True, ""
    try:
        seccomp = write_for(name, facts, wrappers)
    except ProfileUnusable as err:
        return refused(
            name,
            ErrorCode.SANDBOX_DENIED,
            f"{err}; without it the network axis would not hold (AF_VSOCK, io_uring)",
            f"run {name} with seccomp (its default profile readable), or use another engine",
        )

    def runtime_for(
        userns: Userns | None, limits: bool = True
    ) -> str | tuple[Runtime, tuple[str, ...]]:
        def tried(runtime: Runtime) -> str | None:
            return probe(engine, config, image, runtime, host, watcher, userns, limits, seccomp)

        return runtimes.choose(
            name,
            facts,
            config.runtime,
            wrappers,
            tried,
            warm=config.warm,
            userns=userns is not None,
        )

    try:
        found = runtime_for(wanted)
        if isinstance(found, str) and wanted is not None and wanted.flag and asked == "auto":
            # podman's --userns=auto failed here: run without it, and say so
            why_not = userns_failure(wanted.flag, found, config.runtime == "runsc")
            wanted = None
            found = runtime_for(None)
        if isinstance(found, str) and unsupported and _limits_dropped(found):
            enforced = False
            limits_why = (
                f"{name} runs rootless on cgroup v{facts.cgroup_version} "
                f"({facts.cgroup_driver}) without the {', '.join(unsupported)} controllers: "
                f"its probe container was created without the asked limits ({found}), so "
                "memory, CPU and process counts are not limited (only rlimits are)"
            )
            found = runtime_for(wanted, limits=False)
    except runtimes.NoRuntime as no:
        return refused(name, no.code, no.reason, no.recovery)
    except SprawlError as err:
        return refused(name, err.code, err.detail, err.recovery)
    if isinstance(found, str):
        tried = config.runtime if config.runtime not in (None, "auto") else None
        reason, recovery = explain(name, tried or facts.default_runtime, found, config, host)
        return refused(name, ErrorCode.SANDBOX_DENIED, reason, recovery)
    runtime, said = found
    return Admission(
        name,
        True,
        facts=facts,
        image=image,
        runtime=runtime.flag,
        runtime_used=runtime.expect,
        gvisor=runtime.gvisor,
        uids_namespaced=wanted is not None,
        userns_why=wanted.why if wanted is not None else why_not,
        notes=(*said, *limits.notes),
        userns=wanted,
        limits_enforced=enforced,
        limits_why=limits_why,
        seccomp=seccomp,
    )


_LIMIT_FIELDS = (
    "HostConfig.Memory",
    "HostConfig.MemorySwap",
    "HostConfig.NanoCpus",
    "HostConfig.PidsLimit",
    "HostConfig.CpuShares",
)


def _limits_dropped(words: str) -> bool:
    """The probe's inspect shows the limits were not applied (and nothing else differs)."""
    if not words.startswith("inspect differs from what was asked: "):
        return False
    fields = [
        part.split(":")[0].strip()
        for part in words.removeprefix("inspect differs from what was asked: ").split("; ")
    ]
    return bool(fields) and all(f in _LIMIT_FIELDS for f in fields)


_cache: dict[tuple[str, str, str], Admission] = {}
_lock = threading.Lock()
# The engine object an offer admitted (offer.py), for the arm made from that offer next: one
# client per call (issue 26: the arm's own backend() was a second docker client, a second
# connection and, before docker_daemon.py, a second `GET /version`). Only the offer's, whose
# engines nothing else holds, and taken once, so no two arms share (and close) one engine.
_admitted: dict[tuple[str, str], ContainerEngine] = {}


def hand_over(engine: ContainerEngine) -> None:
    with _lock:
        _admitted[(engine.name, engine.endpoint())] = engine


def admitted_engine(name: str, docker_host: str | None) -> ContainerEngine:
    """The engine admit_each admitted under this name and endpoint, else a new backend."""
    made = backend(name, docker_host)
    with _lock:
        return _admitted.pop((name, made.endpoint()), made)


def wrappers_dir(evidence: Evidence | None) -> Path:
    """Where runtime wrappers podman execs live: the state directory's `runtimes/`."""
    if evidence is not None:
        return evidence.root.parent / "runtimes"
    from sprawl_orch.config.state import state_dir

    return state_dir(Config(), os.environ) / "runtimes"


def _wrapper_holds(found: Admission, wrappers: Path) -> bool:
    """A kept podman+runsc admission names a wrapper by path: it must still be there, as
    written (rewritten when tampered with) for the runsc installed now."""
    if not (found.gvisor and found.engine == "podman"):
        return True
    runsc = runsc_path()
    try:
        return runsc is not None and str(ensure_wrapper(wrappers, runsc)) == found.runtime
    except OSError:
        return False


def _recall(
    engine: ContainerEngine, evidence: Evidence, key: str
) -> tuple[Admission | None, dict[str, Any] | None]:
    """(the kept admission if the engine is still the one it was proved on, the identity
    read now; None when the engine cannot be asked: a full admission says why)."""
    try:
        # the subordinate ranges a user namespace is drawn from are part of what was proved
        identity = {
            "engine": engine.identity(),
            "boot": boot_id(),
            "subids": [stamp(SUBUID), stamp(SUBGID)],
        }
    except SprawlError:
        return None, None
    kept = evidence.load(key, identity)
    if kept is None:
        return None, identity
    try:
        kept["userns"] = Userns.from_json(kept.get("userns"))
        found = Admission(**kept)
        if found.uids_namespaced != (found.userns is not None):
            raise TypeError("a kept user-axis claim without its namespace")
        return found, identity
    except (TypeError, KeyError, ValueError):
        evidence.drop(key)
        return None, identity


def admit(
    engine: ContainerEngine,
    config: ContainerConfig,
    host: HostLimits | None = None,
    *,
    evidence: Evidence | None = None,
    watcher: Watcher | None = None,
    fresh: bool = False,
) -> Admission:
    """The engine's admission for `config`: once per process (cached), and once per engine
    identity when `evidence` keeps it on disk. `fresh`: forget both and probe again (a real
    command failed at the engine). The probe is announced to `watcher` (the guardian)."""
    key = (engine.name, engine.endpoint(), config.model_dump_json())
    with _lock:
        if fresh:
            _cache.pop(key, None)
        if key in _cache:
            return _cache[key]
        host = host or HostLimits.this_host()
        kept_key = evidence.key(*key[:2], config, host) if evidence else ""
        found, identity = None, None
        if evidence is not None:
            if fresh:
                evidence.drop(kept_key)
            found, identity = _recall(engine, evidence, kept_key)
        wrappers = wrappers_dir(evidence)
        if found is not None and not (
            _wrapper_holds(found, wrappers)
            and file_holds(found.seccomp, engine.name, found.facts, wrappers)
        ):
            found = None
        if found is None:
            sweep_stale_probes(engine)
            found = _admit(engine, config, host, watcher or NullWatcher(), wrappers)
            if evidence is not None and found.admitted and identity is not None:
                fields = asdict(replace(found, userns=None))
                fields["userns"] = found.userns.to_json() if found.userns else None
                evidence.save(kept_key, identity, {k: fields[k] for k in KEPT})
        _cache[key] = found
        return found


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def admit_each(
    config: ContainerConfig,
    names: Sequence[str] | None = None,
    *,
    first_only: bool = True,
    evidence: Evidence | None = None,
    watcher: Watcher | None = None,
) -> list[tuple[ContainerEngine, Admission]]:
    """Admissions in order (`engine = "auto"`: docker, podman), stopping at the first
    admitted one unless `first_only` is False (doctor wants every engine's answer).
    Unless userns = "off", an admitted engine that keeps no user axis doesn't stop the
    search: `preferred` picks one that does (a second probe container, once)."""
    if names is None:
        names = ENGINES if config.engine == "auto" else (config.engine,)
    out: list[tuple[ContainerEngine, Admission]] = []
    for name in names:
        engine = backend(name, config.docker_host)
        found = admit(engine, config, evidence=evidence, watcher=watcher)
        out.append((engine, found))
        if first_only and found.admitted and (found.uids_namespaced or config.userns == "off"):
            break
    return out


def preferred(
    tried: Sequence[tuple[ContainerEngine, Admission]],
) -> tuple[ContainerEngine, Admission] | None:
    """The first admitted engine that keeps the user axis, else the first admitted."""
    admitted = [pair for pair in tried if pair[1].admitted]
    return next((p for p in admitted if p[1].uids_namespaced), admitted[0] if admitted else None)
