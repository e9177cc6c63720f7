"""Inspect verification (design §3.4) against inspect answers recorded from real docker 20.10
and podman 4.3 (tests/unit/fixtures/*_inspect.json, made by fixtures/record_container.py
from our own create argv, before start)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits
from sprawl_orch.container.verify import Expected, mismatches, verify
from sprawl_orch.core.errors import ErrorCode, SprawlError
from tests.unit.container_fake import fixture_json

META = fixture_json("inspect_meta.json")
HOST = HostLimits({"nofile": 20000, "nproc": 96365}, cpus=2, memory_bytes=24 * 1024**3)
Mutation = Callable[[dict[str, Any]], None]


def expected(engine: str) -> Expected:
    config = ContainerConfig.model_validate(META["config"])
    return Expected.of(
        engine,
        config,
        HOST,
        META[engine]["image"],
        Path(META["copy"]),
        META[engine]["runtime"],
        workdir=Path(META["workdir"]),
    )


def recorded(engine: str) -> dict[str, Any]:
    return dict(fixture_json(f"{engine}_inspect.json"))


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_a_recorded_container_made_from_our_argv_matches(engine: str) -> None:
    assert mismatches(expected(engine), recorded(engine)) == []
    verify(expected(engine), recorded(engine))


def hc(key: str, value: object) -> Mutation:
    return lambda d: d["HostConfig"].__setitem__(key, value)


CASES: list[tuple[str, str, Mutation, str]] = [
    # (field, inspect path, mutation, words expected in the detail)
    ("image", "Image", lambda d: d.__setitem__("Image", "sha256:" + "0" * 64), "found"),
    ("memory", "HostConfig.Memory", hc("Memory", 0), "expected 536870912, found 0"),
    ("memory_swap", "HostConfig.MemorySwap", hc("MemorySwap", -1), "found -1"),
    ("nano_cpus", "HostConfig.NanoCpus", hc("NanoCpus", 0), "expected 1000000000, found 0"),
    ("pids_limit", "HostConfig.PidsLimit", hc("PidsLimit", None), "expected 256, found None"),
    ("cpu_shares", "HostConfig.CpuShares", hc("CpuShares", 1024), "found 1024"),
    (
        "network_mode",
        "HostConfig.NetworkMode",
        hc("NetworkMode", "host"),
        "expected 'none', found 'host'",
    ),
    (
        "log_driver",
        "HostConfig.LogConfig.Type",
        hc("LogConfig", {"Type": "json-file", "Config": {}}),
        "expected 'none', found 'json-file'",
    ),
    ("user", "Config.User", lambda d: d["Config"].__setitem__("User", ""), "found ''"),
    (
        "read_only",
        "HostConfig.ReadonlyRootfs",
        hc("ReadonlyRootfs", False),
        "expected True, found False",
    ),
    ("privileged", "HostConfig.Privileged", hc("Privileged", True), "found True"),
    ("pid_mode", "HostConfig.PidMode", hc("PidMode", "host"), "found 'host'"),
    ("cap_add", "HostConfig.CapAdd", hc("CapAdd", ["SYS_ADMIN"]), "found ['SYS_ADMIN']"),
    ("security_opt", "HostConfig.SecurityOpt", hc("SecurityOpt", []), "found []"),
    (
        "security_opt",
        "HostConfig.SecurityOpt",
        hc("SecurityOpt", ["no-new-privileges", "seccomp=unconfined"]),
        "seccomp=unconfined",
    ),
    (
        "mounts",
        "Mounts",
        lambda d: d["Mounts"].append(
            {"Type": "bind", "Source": "/home/person", "Destination": "/home", "RW": True}
        ),
        "/home/person",
    ),
    (
        "mounts",
        "Mounts",
        lambda d: d["Mounts"][0].__setitem__("Source", "/home/person/tree"),
        "/home/person/tree",
    ),
    ("mounts", "Mounts", lambda d: d["Mounts"][0].__setitem__("RW", False), "'RW': False"),
    ("mounts", "Mounts", lambda d: d["Mounts"][0].__setitem__("Destination", "/"), "found"),
    ("mounts", "Mounts", lambda d: d.__setitem__("Mounts", []), "found []"),
    (
        "mounts",
        "Config.Volumes",
        lambda d: d["Config"].__setitem__("Volumes", {"/data": {}}),
        "/data",
    ),
    ("tmpfs", "HostConfig.Tmpfs", hc("Tmpfs", {}), "found []"),
    ("tmpfs", "HostConfig.Tmpfs[/tmp]", hc("Tmpfs", {"/tmp": "rw,nosuid"}), "'rw,nosuid'"),
    (
        "workdir",
        "Config.WorkingDir",
        lambda d: d["Config"].__setitem__("WorkingDir", "/work"),
        "found '/work'",
    ),
    ("mounts", "Mounts", lambda d: d["Mounts"][0].__setitem__("Destination", "/work"), "'/work'"),
    ("tmpfs", "HostConfig.Tmpfs", hc("Tmpfs", {"/tmp": "mode=1777", "/home": ""}), "/home"),
    ("ulimits", "HostConfig.Ulimits", hc("Ulimits", []), "found []"),
    # containers.conf ipcns/utsns/devices (tests/escapes/test_shaping.py)
    ("ipc_mode", "HostConfig.IpcMode", hc("IpcMode", "host"), "found 'host'"),
    ("ipc_mode", "HostConfig.IpcMode", hc("IpcMode", "container:abc"), "'container:abc'"),
    ("uts_mode", "HostConfig.UTSMode", hc("UTSMode", "host"), "found 'host'"),
    (
        "devices",
        "HostConfig.Devices",
        hc("Devices", [{"PathOnHost": "/dev/kmsg", "PathInContainer": "/dev/kmsg"}]),
        "/dev/kmsg",
    ),
    (
        "runtime",
        "runtime",
        lambda d: (
            d["HostConfig"].__setitem__("Runtime", "crun"),
            d.__setitem__("OCIRuntime", "crun"),
        ),
        "'crun'",
    ),
]


@pytest.mark.parametrize("engine", ["docker", "podman"])
@pytest.mark.parametrize(
    ("field", "where", "mutate", "words"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_field_mismatch_is_named(
    engine: str, field: str, where: str, mutate: Mutation, words: str
) -> None:
    inspect = copy.deepcopy(recorded(engine))
    mutate(inspect)
    found = mismatches(expected(engine), inspect)
    assert [m.field for m in found] == [field]
    with pytest.raises(SprawlError) as err:
        verify(expected(engine), inspect)
    assert err.value.code is ErrorCode.SANDBOX_DENIED
    assert err.value.subject == field
    if where != "runtime":
        assert f"{where}: expected " in err.value.detail
    assert words in err.value.detail
    assert "removed without starting" in err.value.detail


def test_caps_each_engine_its_own_evidence() -> None:
    docker = recorded("docker")
    docker["HostConfig"]["CapDrop"] = ["NET_RAW"]
    assert [m.field for m in mismatches(expected("docker"), docker)] == ["cap_drop"]
    podman = recorded("podman")
    # podman lists the dropped caps one by one; the proof is an empty bounding set
    assert "ALL" not in podman["HostConfig"]["CapDrop"] and not podman["BoundingCaps"]
    podman["BoundingCaps"] = ["CAP_CHOWN"]
    [mismatch] = mismatches(expected("podman"), podman)
    assert (mismatch.field, mismatch.where, mismatch.found) == (
        "cap_drop",
        "BoundingCaps",
        ["CAP_CHOWN"],
    )


def test_podman_read_only_tmpfs_is_allowed_for_podman_only() -> None:
    podman = recorded("podman")
    assert set(podman["HostConfig"]["Tmpfs"]) == {"/tmp", "/run", "/var/tmp"}
    docker = recorded("docker")
    docker["HostConfig"]["Tmpfs"] = podman["HostConfig"]["Tmpfs"]
    assert [m.field for m in mismatches(expected("docker"), docker)] == ["tmpfs"]


def test_several_mismatches_name_the_first_and_count_the_rest() -> None:
    inspect = recorded("docker")
    inspect["HostConfig"].update(Memory=0, MemorySwap=0, NetworkMode="bridge")
    with pytest.raises(SprawlError) as err:
        verify(expected("docker"), inspect)
    assert err.value.subject == "memory"
    assert "(also differs: memory_swap, network_mode)" in err.value.detail
