"""Daemon admission (SPEC §3.1): an engine is admitted only by evidence from the engine.

Steps, each refusing with the engine's own words and a recovery:
1. connect and read facts (version, OS/arch, cgroup version/driver, limit support,
   rootless/userns) — a CLI on PATH or `docker --version` is no evidence;
2. the pinned image is present locally by its fixed ID (never pulled);
3. a probe: create + inspect-verify + start `true` with the configured limits, then
   remove. When the default OCI runtime fails it and another installed runtime passes,
   that runtime is used for every container and the admission says so.
Results are cached once per process per (engine, endpoint, config).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator import arms
from orchestrator.arms import Missing
from orchestrator.config import ContainerConfig
from orchestrator.container.argv import HostLimits, create_argv, fit_limits
from orchestrator.container.engine import Engine, EngineFacts
from orchestrator.container.ownership import own_copy
from orchestrator.container.stale_probes import PROBE_SESSION, owner_label, sweep_stale_probes
from orchestrator.container.verify import Expected, mismatches
from orchestrator.errors import ErrorCode, SprawlError

ENGINE_ORDER: tuple[str, ...] = ("docker", "podman")
PROBE_TIMEOUT = 60.0
_ZERO_TIME = "0001-01-01"


@dataclass(frozen=True)
class Admission:
    engine: str
    admitted: bool
    # admitted
    facts: EngineFacts | None = None
    image: str | None = None
    runtime: str | None = None        # passed as --runtime; None = the engine's default
    runtime_used: str | None = None   # the runtime name containers really run under
    uids_namespaced: bool = False
    userns_why: str = ""
    notes: tuple[str, ...] = ()
    # refused
    code: ErrorCode | None = None
    reason: str = ""
    recovery: str = ""
    missing: Missing | None = None

    def summary(self) -> str:
        if not self.admitted:
            return f"{self.engine}: refused — {self.reason}"
        assert self.facts is not None
        return f"{self.facts.summary()}; runs under {self.runtime_used}" + (
            "; " + "; ".join(self.notes) if self.notes else ""
        )

    def error(self) -> SprawlError:
        return SprawlError(
            self.code or ErrorCode.TOOL_UNAVAILABLE, f"container engine {self.engine}",
            self.reason, self.recovery,
        )

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"engine": self.engine, "admitted": self.admitted}
        if self.admitted and self.facts is not None:
            out |= {
                "server_version": self.facts.server_version,
                "cgroup_version": self.facts.cgroup_version,
                "cgroup_driver": self.facts.cgroup_driver,
                "runtime": self.runtime_used,
                "image": self.image,
                "uids_namespaced": self.uids_namespaced,
                "userns_why": self.userns_why,
                "notes": list(self.notes),
            }
        else:
            out |= {"code": self.code.value if self.code else None, "reason": self.reason,
                    "recovery": self.recovery}
        return out


def refused(engine: str, code: ErrorCode, reason: str, recovery: str,
            missing: Missing | None = None) -> Admission:
    return Admission(engine, False, code=code, reason=reason, recovery=recovery,
                     missing=missing or arms.container_runtime(f"{engine}: {reason}"))


def explain(engine: str, runtime: str, words: str, config: ContainerConfig,
            host: HostLimits | None = None) -> tuple[str, str]:
    """(reason, recovery) for a failed probe or connect, from the engine's own words."""
    low = words.lower()
    if "hybrid mode not supported" in low:
        return (
            f"the {runtime} runtime cannot run containers on this host's hybrid cgroup "
            f"layout (v1 controllers + a v2 mount): {words}",
            f"install runc (apt-get install runc) so admission can fall back to it, or set "
            f"runtime = \"runc\" in containers.conf ({engine})",
        )
    if "setrlimit" in low or "error setting rlimit" in low:
        hard = host.rlimits_hard if host else {}
        asked = ", ".join(f"{k}={v}" for k, v in sorted(config.ulimits.items()))
        limits = ", ".join(f"{k} {hard.get(k)}" for k in sorted(config.ulimits))
        return (
            f"the runtime may not set the asked rlimits ({asked}) above the engine's hard "
            f"limits: {words}",
            f"lower [sandbox.container] ulimits to at most the hard limits ({limits} here), "
            f"or raise the hard limits of the {engine} engine's service",
        )
    if "connection refused" in low or "cannot connect" in low or (
        "no such file or directory" in low and ("connect" in low or "api version" in low)
    ):
        return (
            f"the {engine} daemon is not running (socket refused): {words}",
            f"start it (systemctl start {engine}, or dockerd --host …) or point DOCKER_HOST "
            "at a running daemon",
        )
    if "permission denied" in low and "sock" in low:
        return (f"this user may not use the {engine} socket: {words}",
                f"add the user to the {engine} group, or use a rootless engine")
    return (f"{engine} failed the probe container: {words}",
            f"see `{engine} info` and `sprawl-orch doctor`")


def _state_failure(state: dict[str, object]) -> str | None:
    if str(state.get("StartedAt", "")).startswith(_ZERO_TIME):
        return str(state.get("Error") or "the container never started")
    if state.get("ExitCode") != 0:
        return f"`true` exited with {state.get('ExitCode')}: {state.get('Error') or ''}".strip()
    return None


def probe(engine: Engine, config: ContainerConfig, image: str, runtime: str | None,
          runtime_name: str, host: HostLimits) -> str | None:
    """Run `true` exactly as a command would run (limits, mount, verify). None = passed,
    else the engine's words. Our own faults (the copy can't be given to the user, the
    limits don't fit) raise SprawlError with their own recovery instead."""
    work = Path(tempfile.mkdtemp(prefix="sprawl-probe-"))
    container: str | None = None
    try:
        (work / "copy").mkdir()
        copy = work / "copy"
        own_copy(copy, *fit_limits(config, host).uid_gid)
        tag = f"probe-{secrets.token_hex(4)}"
        argv = create_argv(engine.name, config, image, copy, ["true"], [], tag,
                           PROBE_SESSION, owner_label(), runtime, host=host)
    except SprawlError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    try:
        container = engine.create(argv, {})
        expected = Expected.of(engine.name, config, host, image, copy, runtime_name)
        found = mismatches(expected, engine.inspect(container))
        if found:
            return "inspect differs from what was asked: " + "; ".join(m.text() for m in found)
        attached = engine.start(container, work / "stdout", work / "stderr")
        if not attached.wait(PROBE_TIMEOUT):
            return f"`true` did not finish within {PROBE_TIMEOUT:g} s"
        start_error = attached.collect()
        failure = _state_failure(engine.inspect(container).get("State") or {})
        if failure is None:
            return None
        stderr = (work / "stderr").read_text(errors="replace").strip()
        return start_error or stderr or failure
    except SprawlError as err:
        return err.detail
    finally:
        if container is not None:
            # one left behind (we died here) is removed by the next admission: stale_probes
            with contextlib.suppress(SprawlError):
                engine.remove(container)
        shutil.rmtree(work, ignore_errors=True)


def _fallbacks(facts: EngineFacts) -> list[str]:
    others = [r for r in facts.runtimes if r != facts.default_runtime]
    return sorted(others, key=lambda r: (r != "runc", r))  # runc first: it works everywhere here


def _admit(engine: Engine, config: ContainerConfig, host: HostLimits) -> Admission:
    name = engine.name
    try:
        facts = engine.facts()
    except SprawlError as err:
        reason, recovery = explain(name, "", err.detail, config, host)
        if err.code is ErrorCode.TOOL_UNAVAILABLE:
            reason, recovery = err.detail, err.recovery
        return refused(name, ErrorCode.TOOL_UNAVAILABLE, reason, recovery)
    if facts.os != "linux":
        return refused(name, ErrorCode.TOOL_UNAVAILABLE, f"{name} serves {facts.os} containers",
                       "switch the engine to Linux containers")
    unsupported = facts.unsupported_limits()
    if unsupported:
        return refused(
            name, ErrorCode.SANDBOX_DENIED,
            f"{name} reports no support for {', '.join(unsupported)} limits "
            f"(cgroup v{facts.cgroup_version}, {facts.cgroup_driver})",
            "enable the cgroup controllers (cgroup v2 delegation for rootless engines)",
        )
    image = config.image_for(name)
    if image is None or engine.local_image(image) is None:
        missing = arms.image_not_local(name, image)
        return refused(name, ErrorCode.TOOL_UNAVAILABLE, missing.phrase, missing.recovery,
                       missing)
    try:
        limits = fit_limits(config, host)
    except SprawlError as err:
        return refused(name, err.code, err.detail, err.recovery)
    namespaced, why = facts.uids_namespaced()
    admitted = Admission(
        name, True, facts=facts, image=image, runtime_used=facts.default_runtime,
        uids_namespaced=namespaced, userns_why=why, notes=limits.notes,
    )
    try:
        first = probe(engine, config, image, None, facts.default_runtime, host)
    except SprawlError as err:
        return refused(name, err.code, err.detail, err.recovery)
    if first is None:
        return admitted
    for other in _fallbacks(facts):
        if probe(engine, config, image, other, other, host) is None:
            said = (f"the default runtime {facts.default_runtime} failed the probe "
                    f"({first}); {other} passed it, so every container runs with "
                    f"--runtime {other}")
            return replace(admitted, runtime=other, runtime_used=other,
                           notes=(said, *admitted.notes))
    reason, recovery = explain(name, facts.default_runtime, first, config, host)
    return refused(name, ErrorCode.SANDBOX_DENIED, reason, recovery)


_cache: dict[tuple[str, str, str], Admission] = {}
_lock = threading.Lock()


def admit(engine: Engine, config: ContainerConfig, host: HostLimits | None = None) -> Admission:
    """The engine's admission for `config`, probed once per process and cached."""
    key = (engine.name, engine.endpoint(), config.model_dump_json())
    with _lock:
        if key not in _cache:
            sweep_stale_probes(engine)
            _cache[key] = _admit(engine, config, host or HostLimits.this_host())
        return _cache[key]


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def engine_for(name: str) -> Engine:
    if name == "docker":
        from orchestrator.container.docker import DockerEngine

        return DockerEngine()
    if name == "podman":
        from orchestrator.container.podman import PodmanEngine

        return PodmanEngine()
    raise ValueError(f"unknown engine {name!r}; expected one of {ENGINE_ORDER}")


def admit_each(config: ContainerConfig, names: Sequence[str] | None = None,
               *, first_only: bool = True) -> list[tuple[Engine, Admission]]:
    """Admissions in order (`engine = "auto"`: docker, podman), stopping at the first
    admitted one unless `first_only` is False (doctor wants every engine's answer)."""
    if names is None:
        names = ENGINE_ORDER if config.engine == "auto" else (config.engine,)
    out: list[tuple[Engine, Admission]] = []
    for name in names:
        engine = engine_for(name)
        out.append((engine, admit(engine, config)))
        if first_only and out[-1][1].admitted:
            break
    return out
