"""Daemon admission (design §3.1): an engine is admitted only by evidence from the engine.

Steps, each refusing with the engine's own words and a recovery:
1. connect and read facts (version, OS/arch, cgroup version/driver, limit support,
   rootless/userns) — a CLI on PATH or `docker --version` is no evidence;
2. the pinned image is present locally by its fixed ID (never pulled);
3. a probe: create + inspect-verify + start `true` with the configured limits, then
   remove. When the default OCI runtime fails it and another installed runtime passes,
   that runtime is used for every container and the admission says so.
Results are cached once per process per (engine, endpoint, config), and a passed admission
is kept on disk while the engine's identity holds (container/evidence.py).

The probe container and its directory are announced to the guardian (`watcher`) before
they exist, like every command's: a process killed mid-probe leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sprawl_orch import arms
from sprawl_orch.arms import Missing
from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits, container_name, create_argv, fit_limits
from sprawl_orch.container.engine import Engine, EngineFacts
from sprawl_orch.container.evidence import Evidence, boot_id, stamp
from sprawl_orch.container.ownership import give_copy, take_back
from sprawl_orch.container.stale_probes import PROBE_SESSION, owner_label, sweep_stale_probes
from sprawl_orch.container.userns import (
    SUBGID,
    SUBUID,
    Userns,
    host_owner,
    plan,
    principal_problem,
)
from sprawl_orch.container.verify import Expected, mismatches
from sprawl_orch.errors import ErrorCode, SprawlError
from sprawl_orch.launch import NullWatcher, Watcher

ENGINE_ORDER: tuple[str, ...] = ("docker", "podman")
PROBE_TIMEOUT = 60.0
_ZERO_TIME = "0001-01-01"
# Under a user namespace the probe creates this file in its copy: its owner, read from
# the host, must be the uid admission computed (else the copy could not be written).
PROBE_FILE = "sprawl-probe"


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
    userns: Userns | None = None      # the user namespace every container is put in
    limits_enforced: bool = True      # False: the probe saw the engine drop the limits
    limits_why: str = ""
    # refused
    code: ErrorCode | None = None
    reason: str = ""
    recovery: str = ""
    missing: Missing | None = None
    # When the kept evidence this admission was read from was proved (None: probed now).
    proved_at: str | None = None

    def summary(self) -> str:
        if not self.admitted:
            return f"{self.engine}: refused — {self.reason}"
        assert self.facts is not None
        user = (f"user namespace: {self.userns_why}" if self.uids_namespaced
                else f"no user namespace: {self.userns_why}")
        if not self.limits_enforced:
            user += f"; no resource limits: {self.limits_why}"
        return f"{self.facts.summary()}; runs under {self.runtime_used}; {user}" + (
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
                "userns": self.userns.as_dict() if self.userns else None,
                "limits_enforced": self.limits_enforced,
                "limits_why": self.limits_why,
                "notes": list(self.notes),
                "proved_at": self.proved_at,
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


def _remove_probe(engine: Engine, ref: str, name: str, watcher: Watcher) -> None:
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


def probe(engine: Engine, config: ContainerConfig, image: str, runtime: str | None,
          runtime_name: str, host: HostLimits, watcher: Watcher | None = None,
          userns: Userns | None = None, limits: bool = True) -> str | None:
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
        argv = create_argv(engine.name, config, image, work / "copy", command, [], tag,
                           PROBE_SESSION, owner_label(), runtime, host=host,
                           userns=userns.flags() if userns else (), limits=limits)
        try:
            return _run_probe(engine, config, image, runtime_name, host, argv, name, work,
                              watcher, userns, limits)
        except _OwnFault as fault:
            raise fault.err from None
    finally:
        with contextlib.suppress(SprawlError):
            take_back(engine, userns, work / "copy")
        shutil.rmtree(work, ignore_errors=True)
        if not work.exists():
            watcher.scratch_gone(work)


def _run_probe(engine: Engine, config: ContainerConfig, image: str, runtime_name: str,
               host: HostLimits, argv: tuple[str, ...], name: str, work: Path,
               watcher: Watcher, userns: Userns | None, limits: bool) -> str | None:
    copy = work / "copy"
    container: str | None = None
    watcher.expect(name)
    try:
        try:
            container = engine.create(argv, {})
        except SprawlError:
            _remove_probe(engine, name, name, watcher)  # a create that failed late may exist
            raise
        watcher.created(name, container)
        expected = Expected.of(engine.name, config, host, image, copy, runtime_name, userns,
                               enforced=limits)
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
        return (f"the probe's file is owned by {st.st_uid}:{st.st_gid} on the host, not by "
                f"the mapped {owner[0]}:{owner[1]}")
    return None


def _fallbacks(facts: EngineFacts) -> list[str]:
    others = [r for r in facts.runtimes if r != facts.default_runtime]
    return sorted(others, key=lambda r: (r != "runc", r))  # runc first: it works everywhere here


def _admit(engine: Engine, config: ContainerConfig, host: HostLimits,
           watcher: Watcher) -> Admission:
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
    # a rootless engine without the controllers runs, limits unasked and resources = no,
    # once its probe shows it drops them (below); a rootful one is refused
    if unsupported and not facts.rootless:
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
        return refused(name, err.code, err.detail, err.recovery,
                       arms.config_invalid(err.subject, err.detail, err.recovery))
    asked = config.userns
    wanted, why_not = plan(name, facts.rootless, facts.userns_remap, facts.root_dir,
                           facts.uid_map, facts.gid_map, asked)
    if wanted is None and asked == "required":
        return refused(
            name, ErrorCode.SANDBOX_DENIED,
            f'[sandbox.container] userns = "required", but {name} gives no user namespace: '
            f"{why_not}",
            'use an engine that does (podman with /etc/subuid ranges for "containers", a '
            'dockerd with --userns-remap, a rootless engine) or set userns = "auto"',
        )
    enforced, limits_why = True, ""
    try:
        found = _probe_runtimes(engine, config, image, facts, host, watcher, wanted)
        if isinstance(found, str) and wanted is not None and wanted.flag and asked == "auto":
            # podman's --userns=auto failed here: run without it, and say so
            why_not = f"podman --userns={wanted.flag} failed the probe: {found}"
            wanted = None
            found = _probe_runtimes(engine, config, image, facts, host, watcher, None)
        if isinstance(found, str) and unsupported and _limits_dropped(found):
            enforced = False
            limits_why = (
                f"{name} runs rootless on cgroup v{facts.cgroup_version} "
                f"({facts.cgroup_driver}) without the {', '.join(unsupported)} controllers: "
                f"its probe container was created without the asked limits ({found}), so "
                "memory, CPU and process counts are not limited (only rlimits are)"
            )
            found = _probe_runtimes(engine, config, image, facts, host, watcher, wanted,
                                    limits=False)
    except SprawlError as err:
        return refused(name, err.code, err.detail, err.recovery)
    if isinstance(found, str):
        reason, recovery = explain(name, facts.default_runtime, found, config, host)
        return refused(name, ErrorCode.SANDBOX_DENIED, reason, recovery)
    runtime, said = found
    return Admission(
        name, True, facts=facts, image=image, runtime=runtime,
        runtime_used=runtime or facts.default_runtime, uids_namespaced=wanted is not None,
        userns_why=wanted.why if wanted is not None else why_not,
        notes=(*said, *limits.notes), userns=wanted, limits_enforced=enforced,
        limits_why=limits_why,
    )


_LIMIT_FIELDS = ("HostConfig.Memory", "HostConfig.MemorySwap", "HostConfig.NanoCpus",
                 "HostConfig.PidsLimit", "HostConfig.CpuShares")


def _limits_dropped(words: str) -> bool:
    """The probe's inspect shows the limits were not applied (and nothing else differs)."""
    if not words.startswith("inspect differs from what was asked: "):
        return False
    fields = [part.split(":")[0].strip() for part in
              words.removeprefix("inspect differs from what was asked: ").split("; ")]
    return bool(fields) and all(f in _LIMIT_FIELDS for f in fields)


def _probe_runtimes(engine: Engine, config: ContainerConfig, image: str, facts: EngineFacts,
                    host: HostLimits, watcher: Watcher, userns: Userns | None,
                    limits: bool = True) -> str | tuple[str | None, tuple[str, ...]]:
    """(runtime to pass, what to say) for the first runtime passing the probe — the
    engine's default, else another installed one — or the default's failure words."""
    first = probe(engine, config, image, None, facts.default_runtime, host, watcher, userns,
                  limits)
    if first is None:
        return None, ()
    for other in _fallbacks(facts):
        if probe(engine, config, image, other, other, host, watcher, userns, limits) is None:
            return other, (f"the default runtime {facts.default_runtime} failed the probe "
                           f"({first}); {other} passed it, so every container runs with "
                           f"--runtime {other}",)
    return first


_cache: dict[tuple[str, str, str], Admission] = {}
_lock = threading.Lock()
# The fields of an admitted Admission that are kept on disk (container/evidence.py).
_KEPT = ("engine", "admitted", "facts", "image", "runtime", "runtime_used", "uids_namespaced",
         "userns_why", "notes", "userns", "limits_enforced", "limits_why")


def _recall(engine: Engine, evidence: Evidence, key: str) -> tuple[Admission | None,
                                                                    dict[str, Any] | None]:
    """(the kept admission if the engine is still the one it was proved on, the identity
    read now; None when the engine cannot be asked: a full admission says why)."""
    try:
        # the subordinate ranges a user namespace is drawn from are part of what was proved
        identity = {"engine": engine.identity(), "boot": boot_id(),
                    "subids": [stamp(SUBUID), stamp(SUBGID)]}
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


def admit(engine: Engine, config: ContainerConfig, host: HostLimits | None = None, *,
          evidence: Evidence | None = None, watcher: Watcher | None = None,
          fresh: bool = False) -> Admission:
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
        if found is None:
            sweep_stale_probes(engine)
            found = _admit(engine, config, host, watcher or NullWatcher())
            if evidence is not None and found.admitted and identity is not None:
                fields = asdict(replace(found, userns=None))
                fields["userns"] = found.userns.to_json() if found.userns else None
                evidence.save(kept_key, identity, {k: fields[k] for k in _KEPT})
        _cache[key] = found
        return found


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def engine_for(name: str) -> Engine:
    if name == "docker":
        from sprawl_orch.container.docker import DockerEngine

        return DockerEngine()
    if name == "podman":
        from sprawl_orch.container.podman import PodmanEngine

        return PodmanEngine()
    raise ValueError(f"unknown engine {name!r}; expected one of {ENGINE_ORDER}")


def admit_each(config: ContainerConfig, names: Sequence[str] | None = None,
               *, first_only: bool = True, evidence: Evidence | None = None,
               watcher: Watcher | None = None) -> list[tuple[Engine, Admission]]:
    """Admissions in order (`engine = "auto"`: docker, podman), stopping at the first
    admitted one unless `first_only` is False (doctor wants every engine's answer).
    Unless userns = "off", an admitted engine that keeps no user axis doesn't stop the
    search: `preferred` picks one that does (a second probe container, once)."""
    if names is None:
        names = ENGINE_ORDER if config.engine == "auto" else (config.engine,)
    out: list[tuple[Engine, Admission]] = []
    for name in names:
        engine = engine_for(name)
        found = admit(engine, config, evidence=evidence, watcher=watcher)
        out.append((engine, found))
        if first_only and found.admitted and (found.uids_namespaced or config.userns == "off"):
            break
    return out


def preferred(tried: Sequence[tuple[Engine, Admission]]) -> tuple[Engine, Admission] | None:
    """The first admitted engine that keeps the user axis, else the first admitted."""
    admitted = [pair for pair in tried if pair[1].admitted]
    return next((p for p in admitted if p[1].uids_namespaced), admitted[0] if admitted else None)
