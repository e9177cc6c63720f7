"""Inspect verification before start (design §3.4): a pure comparison.

The engine's own inspect answer is compared with what was asked. Docker and podman
spell some fields differently; every difference handled here was seen in a real
inspect (fixtures in tests/unit/fixtures/):

- image: docker `Image` is "sha256:<hex>", podman's is bare hex (its `Config.Image`
  keeps what was given).
- caps: docker keeps `CapDrop: ["ALL"]`; podman 4.3 expands ALL into the default set
  it would have granted and reports `BoundingCaps`/`EffectiveCaps` (null when empty).
- tmpfs: podman's `--read-only-tmpfs` (default true) adds /run and /var/tmp next to
  our /tmp; tmpfs is memory, not a host path, so those are allowed for podman only.
- ulimits: docker names them "nofile", podman "RLIMIT_NOFILE".
- runtime: docker `HostConfig.Runtime`, podman top-level `OCIRuntime`
  (`HostConfig.Runtime` is always "oci" there). Podman 4.3 reports what `--runtime` was
  given: a name ("runc") as the name, a path (the runsc wrapper) as that path; the
  comparison is exact -- a runtime of the same file name elsewhere is another runtime.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits, destination_of, fit_limits
from sprawl_orch.container.userns import Userns, mapping_problem
from sprawl_orch.core.errors import ErrorCode, SprawlError

PODMAN_READ_ONLY_TMPFS: frozenset[str] = frozenset({"/run", "/var/tmp"})
NO_NEW_PRIVILEGES: frozenset[str] = frozenset(
    {"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true"}
)
WEAKENING_OPTS: tuple[str, ...] = (
    "unconfined",
    "label=disable",
    "no-new-privileges:false",
    "no-new-privileges=false",
)


@dataclass(frozen=True)
class Expected:
    engine: str
    image_id: str
    memory: int
    memory_swap: int
    nano_cpus: int
    pids_limit: int
    cpu_shares: int
    user: str
    copy: str
    runtime: str
    ulimits: tuple[tuple[str, int, int], ...]
    userns: Userns | None = None
    destination: str = ""  # where the copy is mounted; "" = at its own path
    seccomp: str = ""  # the profile file (seccomp_profile.py); "" = none asked
    read_only: tuple[tuple[str, str], ...] = ()  # (source, destination) binds, read-only

    @classmethod
    def of(
        cls,
        engine: str,
        config: ContainerConfig,
        host: HostLimits,
        image_id: str,
        copy: Path,
        runtime: str,
        userns: Userns | None = None,
        workdir: Path | None = None,
        enforced: bool = True,
        gvisor: bool = False,
        seccomp: str | None = None,
        read_only: tuple[tuple[str, str], ...] = (),
    ) -> Expected:
        limits = fit_limits(config, host, gvisor)
        on = 1 if enforced else 0  # limits not asked: the engine must report none (0)
        return cls(
            engine=engine,
            image_id=image_id,
            memory=limits.memory_bytes * on,
            memory_swap=limits.memory_swap_bytes * on,
            nano_cpus=limits.nano_cpus * on,
            pids_limit=limits.pids_limit * on,
            cpu_shares=limits.cpu_shares * on,
            user=limits.user,
            copy=str(copy),
            runtime=runtime,
            ulimits=limits.ulimits,
            userns=userns,
            destination=destination_of(copy, workdir),
            seccomp=seccomp or "",
            read_only=read_only,
        )


@dataclass(frozen=True)
class Mismatch:
    field: str  # our stable name, e.g. "memory"
    where: str  # the inspect path, e.g. "HostConfig.Memory"
    expected: object
    found: object

    def text(self) -> str:
        return f"{self.where}: expected {self.expected!r}, found {self.found!r}"


def _bare(image: object) -> str:
    return str(image or "").removeprefix("sha256:")


def _mounts(expected: Expected, inspect: Mapping[str, Any]) -> Mismatch | None:
    where = expected.destination or expected.copy
    want = [{"Type": "bind", "Source": expected.copy, "Destination": where, "RW": True}]
    want += [
        {"Type": "bind", "Source": source, "Destination": target, "RW": False}
        for source, target in expected.read_only
    ]
    found = [
        {k: m.get(k) for k in ("Type", "Source", "Destination", "RW")}
        for m in (inspect.get("Mounts") or [])
    ]
    # Engines list mounts in their own order: compared by destination.
    want.sort(key=lambda m: str(m["Destination"]))
    found.sort(key=lambda m: str(m["Destination"]))
    if found != want:
        return Mismatch("mounts", "Mounts", want, found)
    volumes = (inspect.get("Config") or {}).get("Volumes")
    if volumes:
        return Mismatch("mounts", "Config.Volumes", None, volumes)
    return None


def _caps(inspect: Mapping[str, Any]) -> Mismatch | None:
    hc = inspect.get("HostConfig") or {}
    added = hc.get("CapAdd") or []
    if added:
        return Mismatch("cap_add", "HostConfig.CapAdd", [], added)
    dropped = [str(c).upper() for c in hc.get("CapDrop") or []]
    if "ALL" in dropped:
        return None
    # podman: ALL is expanded; the evidence is the bounding set being empty.
    if "BoundingCaps" in inspect and not inspect["BoundingCaps"]:
        return None
    where = "BoundingCaps" if "BoundingCaps" in inspect else "HostConfig.CapDrop"
    return Mismatch("cap_drop", where, ["ALL"], inspect.get("BoundingCaps", hc.get("CapDrop")))


def _security(inspect: Mapping[str, Any]) -> Mismatch | None:
    opts = [str(o) for o in (inspect.get("HostConfig") or {}).get("SecurityOpt") or []]
    weak = [o for o in opts if any(w in o for w in WEAKENING_OPTS)]
    if weak or not NO_NEW_PRIVILEGES.intersection(opts):
        return Mismatch("security_opt", "HostConfig.SecurityOpt", ["no-new-privileges"], opts)
    return None


def _seccomp(expected: Expected, inspect: Mapping[str, Any]) -> Mismatch | None:
    """docker's CLI reads the file and sends its JSON, which inspect shows inline; podman
    keeps the path it read (podman 4.3). Either must be our profile, and the only one."""
    if not expected.seccomp:
        return None
    opts = [str(o) for o in (inspect.get("HostConfig") or {}).get("SecurityOpt") or []]
    given = [o.partition("=")[2] for o in opts if o.startswith(("seccomp=", "seccomp:"))]
    where = "HostConfig.SecurityOpt[seccomp]"
    try:
        with open(expected.seccomp, encoding="utf-8") as f:
            want = f.read()
    except OSError as err:
        return Mismatch("seccomp", where, expected.seccomp, f"unreadable: {err.strerror}")
    if len(given) == 1 and expected.engine == "podman" and given[0] == expected.seccomp:
        return None
    docker = len(given) == 1 and expected.engine == "docker"
    try:
        if docker and json.loads(given[0]) == json.loads(want):
            return None
    except ValueError:
        pass
    return Mismatch("seccomp", where, expected.seccomp, [g[:80] for g in given])


def _tmpfs(expected: Expected, inspect: Mapping[str, Any]) -> Mismatch | None:
    given: Mapping[str, Any] = (inspect.get("HostConfig") or {}).get("Tmpfs") or {}
    tmpfs = set(given)
    allowed = {"/tmp"} | (PODMAN_READ_ONLY_TMPFS if expected.engine == "podman" else set())
    if "/tmp" not in tmpfs or not tmpfs <= allowed:
        return Mismatch("tmpfs", "HostConfig.Tmpfs", sorted(allowed), sorted(tmpfs))
    # /tmp must be usable by the command's uid: docker reports "mode=1777", podman
    # "mode=1777,rw,rprivate,nosuid,nodev,tmpcopyup".
    if "mode=1777" not in str(given["/tmp"] or "").split(","):
        return Mismatch("tmpfs", "HostConfig.Tmpfs[/tmp]", "mode=1777", given["/tmp"])
    return None


def _shared_with_host(inspect: Mapping[str, Any]) -> Mismatch | None:
    """No host IPC or UTS namespace, no device of the host: containers.conf (`ipcns`,
    `utsns`, `devices`) adds them to every podman container without a flag. --ipc private
    overrides the file (argv.py), but podman 4.3 reports IpcMode "shareable" either way, so
    only a plain "host"/"container:" here is evidence; devices and UTS are reported truly."""
    hc = inspect.get("HostConfig") or {}
    ipc, uts = str(hc.get("IpcMode") or ""), str(hc.get("UTSMode") or "")
    if ipc == "host" or ipc.startswith("container:"):
        return Mismatch("ipc_mode", "HostConfig.IpcMode", "private", ipc)
    if uts == "host" or uts.startswith("container:"):
        return Mismatch("uts_mode", "HostConfig.UTSMode", "private", uts)
    devices = hc.get("Devices") or []
    if devices:
        return Mismatch("devices", "HostConfig.Devices", [], devices)
    return None


def _ulimits(expected: Expected, inspect: Mapping[str, Any]) -> Mismatch | None:
    found = sorted(
        (str(u.get("Name", "")).lower().removeprefix("rlimit_"), u.get("Soft"), u.get("Hard"))
        for u in (inspect.get("HostConfig") or {}).get("Ulimits") or []
    )
    want = sorted(expected.ulimits)
    if found != want:
        return Mismatch("ulimits", "HostConfig.Ulimits", want, found)
    return None


def _runtime(expected: Expected, inspect: Mapping[str, Any]) -> Mismatch | None:
    if expected.engine == "podman":
        where, found = "OCIRuntime", inspect.get("OCIRuntime")
    else:
        where, found = "HostConfig.Runtime", (inspect.get("HostConfig") or {}).get("Runtime")
    if found != expected.runtime:
        return Mismatch("runtime", where, expected.runtime, found)
    return None


def _userns(expected: Expected, inspect: Mapping[str, Any]) -> Mismatch | None:
    if expected.userns is None:
        return None
    uid, _, gid = expected.user.partition(":")
    found = mapping_problem(expected.userns, int(uid), int(gid or uid), inspect)
    if found is None:
        return None
    where = (
        "HostConfig.UsernsMode" if expected.userns.uid_map is not None else "HostConfig.IDMappings"
    )
    return Mismatch("userns", where, found[0], found[1])


def mismatches(expected: Expected, inspect: Mapping[str, Any]) -> list[Mismatch]:
    """Every difference between what was asked and what the engine set up."""
    hc: Mapping[str, Any] = inspect.get("HostConfig") or {}
    config: Mapping[str, Any] = inspect.get("Config") or {}
    out: list[Mismatch] = []

    def same(field: str, where: str, want: object, found: object) -> None:
        if want != found:
            out.append(Mismatch(field, where, want, found))

    same("image", "Image", _bare(expected.image_id), _bare(inspect.get("Image")))
    same("memory", "HostConfig.Memory", expected.memory, hc.get("Memory"))
    same("memory_swap", "HostConfig.MemorySwap", expected.memory_swap, hc.get("MemorySwap"))
    same("nano_cpus", "HostConfig.NanoCpus", expected.nano_cpus, hc.get("NanoCpus"))
    same("pids_limit", "HostConfig.PidsLimit", expected.pids_limit, hc.get("PidsLimit"))
    same("cpu_shares", "HostConfig.CpuShares", expected.cpu_shares, hc.get("CpuShares"))
    same("network_mode", "HostConfig.NetworkMode", "none", hc.get("NetworkMode"))
    # no engine-kept log: it would hold every byte printed on the host's disk (argv.py)
    log = (hc.get("LogConfig") or {}).get("Type")
    same("log_driver", "HostConfig.LogConfig.Type", "none", log)
    same("user", "Config.User", expected.user, config.get("User"))
    same(
        "workdir",
        "Config.WorkingDir",
        expected.destination or expected.copy,
        config.get("WorkingDir"),
    )
    same("read_only", "HostConfig.ReadonlyRootfs", True, hc.get("ReadonlyRootfs"))
    same("privileged", "HostConfig.Privileged", False, hc.get("Privileged"))
    if hc.get("PidMode") not in ("", "private", None):
        out.append(Mismatch("pid_mode", "HostConfig.PidMode", "private", hc.get("PidMode")))
    for check in (
        _caps(inspect),
        _security(inspect),
        _seccomp(expected, inspect),
        _mounts(expected, inspect),
        _tmpfs(expected, inspect),
        _shared_with_host(inspect),
        _ulimits(expected, inspect),
        _runtime(expected, inspect),
        _userns(expected, inspect),
    ):
        if check is not None:
            out.append(check)
    return out


def refusal(mismatch: Mismatch, engine: str) -> SprawlError:
    return SprawlError(
        ErrorCode.SANDBOX_DENIED,
        subject=mismatch.field,
        detail=f"{engine} created the container differently from what was asked — "
        f"{mismatch.text()}; it was removed without starting",
        recovery=f"the {engine} engine or its runtime does not apply this setting; run "
        "`sprawl-orch doctor`, or use another engine/runtime",
    )


def verify(expected: Expected, inspect: Mapping[str, Any]) -> None:
    """Raise E_SANDBOX_DENIED naming the first differing field (and counting the rest)."""
    found = mismatches(expected, inspect)
    if found:
        err = refusal(found[0], expected.engine)
        if len(found) > 1:
            others = ", ".join(m.field for m in found[1:])
            err = SprawlError(
                err.code, err.subject, f"{err.detail} (also differs: {others})", err.recovery
            )
        raise err


def as_command_user(inspect: dict[str, Any], init_user: str, command_user: str) -> dict[str, Any]:
    """A warm container's inspect, checked to run its idle init as `init_user`, with the
    command's user put in its place so `verify` compares everything else as for a fresh one
    (each command's exec names the command's user; warm.py)."""
    config = dict(inspect.get("Config") or {})
    if str(config.get("User") or "") != init_user:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            "container verification",
            f"user: expected {init_user!r} for the warm container's init, found "
            f"{config.get('User')!r}",
            "see `sprawl-orch doctor`; the engine changed the user",
        )
    config["User"] = command_user
    return {**inspect, "Config": config}
