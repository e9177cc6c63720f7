"""User namespaces of the container arm: maps, subordinate ranges, the per-engine plan and
the inspect check (orchestrator/container/userns.py, verify.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits, create_argv
from sprawl_orch.container.userns import (
    PODMAN_AUTO,
    IdMap,
    Userns,
    docker_remap,
    host_owner,
    mapping_problem,
    podman_auto,
    principal_problem,
    subordinate,
)
from sprawl_orch.container.verify import Expected, mismatches

HOST = HostLimits({"nofile": 20000, "nproc": 96365}, 2, 24 * 1024**3)
IMAGE = "sha256:" + "b" * 64


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def auto(tmp: Path) -> Userns:
    found = podman_auto(
        write(tmp, "subuid", "containers:1000000000:268435456\n"),
        write(tmp, "subgid", "containers:1000000000:268435456\n"),
    )
    assert found is not None
    return found


def podman_inspect(uid_map: list[str], gid_map: list[str] | None = None) -> dict[str, Any]:
    return {
        "HostConfig": {
            "UsernsMode": "",
            "IDMappings": {"UidMap": uid_map, "GidMap": uid_map if gid_map is None else gid_map},
        }
    }


def test_id_map_maps_inside_and_refuses_outside() -> None:
    m = IdMap.parse(["0:1000000000:65536"])
    assert m.host_id(0) == 1000000000
    assert m.host_id(65534) == 1000065534
    assert m.host_id(65536) is None
    laid = IdMap.from_subordinate([range(300, 310), range(100, 110)])  # ascending, end to end
    assert laid.text() == ["0:100:10", "10:300:10"]
    assert laid.host_id(12) == 302


def test_subordinate_reads_only_that_account(tmp_path: Path) -> None:
    sub = write(
        tmp_path, "subuid", "containers:1000:10\nother:5000:10\nbroken line\ncontainers:2000:5\n"
    )
    assert subordinate("containers", sub) == [range(1000, 1010), range(2000, 2005)]
    assert subordinate("nobody", sub) == []
    assert subordinate("containers", tmp_path / "absent") == []


def test_podman_auto_needs_both_files(tmp_path: Path) -> None:
    assert (
        podman_auto(write(tmp_path, "u", "containers:1:65536\n"), write(tmp_path, "g", "")) is None
    )
    found = auto(tmp_path)
    assert found.flag == PODMAN_AUTO and found.uid_map is None
    assert "1000000000+268435456" in found.why


def test_podman_auto_map_is_checked_against_the_reserved_range(tmp_path: Path) -> None:
    userns = auto(tmp_path)
    good = podman_inspect(["0:1000065536:65536"])
    assert mapping_problem(userns, 65534, 65534, good) is None
    assert host_owner(userns, 65534, 65534, good) == (1000131070, 1000131070)
    # no map at all: the container shares the host's uids
    assert mapping_problem(userns, 65534, 65534, podman_inspect([])) is not None
    # a map outside the reserved range (e.g. onto real accounts) is refused
    assert mapping_problem(userns, 65534, 65534, podman_inspect(["0:0:65536"])) is not None
    # a map that doesn't contain the command's uid is refused
    assert mapping_problem(userns, 65534, 65534, podman_inspect(["0:1000000000:1000"])) is not None
    # the gid map counts too
    assert (
        mapping_problem(userns, 65534, 65534, podman_inspect(["0:1000000000:65536"], ["0:0:65536"]))
        is not None
    )
    with pytest.raises(ValueError):
        host_owner(userns, 65534, 65534, podman_inspect(["0:1000000000:1000"]))


def test_docker_remap_from_the_root_dir(tmp_path: Path) -> None:
    sub = write(tmp_path, "subuid", "containers:1000000000:268435456\ndockremap:1300000000:65536\n")
    found, why = docker_remap("/var/lib/sprawl-orch/docker-userns/1300000000.1300000000", sub, sub)
    assert found is not None and why == ""
    assert found.uid_map is not None and found.uid_map.text() == ["0:1300000000:65536"]
    assert host_owner(found, 65534, 65534, {}) == (1300065534, 1300065534)
    # the daemon's own user namespace is what must be in force
    assert mapping_problem(found, 65534, 65534, {"HostConfig": {"UsernsMode": ""}}) is None
    assert mapping_problem(found, 65534, 65534, {"HostConfig": {"UsernsMode": "host"}})
    missing, why = docker_remap("/var/lib/docker", sub, sub)
    assert missing is None and "names no uid.gid" in why
    missing, why = docker_remap("/x/7.7", sub, sub)
    assert missing is None and "no account" in why


def test_principal_problem_names_root_and_accounts() -> None:
    assert principal_problem(0) is not None
    assert "host account" in (principal_problem(65534) or "")  # nobody
    assert principal_problem(1_000_065_534) is None


def test_argv_carries_the_flag_and_verify_checks_the_map(tmp_path: Path) -> None:
    userns = auto(tmp_path)
    copy = tmp_path / "copy"
    argv = create_argv(
        "podman",
        ContainerConfig(),
        IMAGE,
        copy,
        ["id"],
        [],
        "t-1",
        "t",
        "r",
        None,
        host=HOST,
        userns=userns.flags(),
    )
    at = argv.index("--userns")
    assert argv[at + 1] == PODMAN_AUTO
    plain = create_argv(
        "podman", ContainerConfig(), IMAGE, copy, ["id"], [], "t-1", "t", "r", None, host=HOST
    )
    assert "--userns" not in plain
    expected = Expected.of("podman", ContainerConfig(), HOST, IMAGE, copy, "runc", userns)
    found = [m for m in mismatches(expected, podman_inspect([])) if m.field == "userns"]
    assert found and found[0].where == "HostConfig.IDMappings"
    found = [
        m
        for m in mismatches(expected, podman_inspect(["0:1000000000:65536"]))
        if m.field == "userns"
    ]
    assert found == []


def test_auto_prefers_the_engine_that_keeps_the_user_axis(tmp_path: Path) -> None:
    from sprawl_orch.core.engine_offer import EngineOffer
    from sprawl_orch.selection.choice import choose
    from sprawl_orch.selection.offerings import Offerings

    plain = EngineOffer("docker", True, "docker", image=IMAGE)
    namespaced = EngineOffer("podman", True, "podman", image=IMAGE, uids_namespaced=True)
    both = Offerings(platform="linux", scratch=tmp_path, engines=(plain, namespaced))
    assert choose("auto", both).engine == "podman"
    assert choose("container", both, engine="docker").engine == "docker"
    only_plain = Offerings(platform="linux", scratch=tmp_path, engines=(plain,))
    assert choose("auto", only_plain).engine == "docker"


def test_a_copy_a_container_owns_keeps_its_principal(tmp_path: Path) -> None:
    userns = auto(tmp_path)
    assert userns.flags() == ("--userns", PODMAN_AUTO)
    # the copy is owned by slot 1's uid 65534: the next command gets slot 1 by name
    owned = (1_000_065_536 + 65534, 1_000_065_536 + 65534)
    assert userns.flags(owner=owned) == (
        "--uidmap",
        "0:1000065536:65536",
        "--gidmap",
        "0:1000065536:65536",
    )
    # root-owned (fresh), unaligned, or outside the range: a fresh range from podman
    for owner in ((0, 0), (1_000_000_100, 1_000_000_100), (65534, 65534)):
        assert userns.flags(owner=owner) == ("--userns", PODMAN_AUTO)


def test_a_kept_admission_keeps_its_user_namespace(tmp_path: Path) -> None:
    """Evidence on disk must bring the namespace back with the claim: a recalled
    "user = yes" without it would run containers without one."""
    from sprawl_orch.config import EngineImages
    from sprawl_orch.container.admission import admit, clear_cache
    from sprawl_orch.container.evidence import Evidence
    from tests.unit.container_fake import FakeEngine, facts

    rootless_map = ((0, 1500, 1), (1, 1_400_000_000, 65536))
    config = ContainerConfig(images=EngineImages(docker=IMAGE))
    evidence = Evidence(tmp_path / "admission")

    def engine() -> FakeEngine:
        found = FakeEngine(
            facts(rootless=True, uid_map=rootless_map, gid_map=rootless_map), [IMAGE]
        )
        found.endpoint_ = "fake"
        return found

    clear_cache()
    try:
        first = admit(engine(), config, HOST, evidence=evidence)  # type: ignore[arg-type]
        assert first.admitted and first.userns is not None and first.uids_namespaced
        clear_cache()
        again = admit(engine(), config, HOST, evidence=evidence)  # type: ignore[arg-type]
        assert again.proved_at is not None, "not recalled from disk"
        assert again.userns == first.userns
        assert again.uids_namespaced
    finally:
        clear_cache()


def test_rootless_without_controllers_runs_unlimited_and_says_so(tmp_path: Path) -> None:
    """Rootless podman on cgroup v1 creates the container without the asked limits
    (inspect: Memory 0): admission sees that in its probe, stops asking, and the arm
    claims resources = no with the probe's words. A rootful engine is still refused."""
    from sprawl_orch.config import EngineImages
    from sprawl_orch.container.admission import admit, clear_cache
    from sprawl_orch.container.arm import ContainerArm
    from sprawl_orch.core.assurances import Guarantee, Kept
    from tests.unit.container_fake import FakeEngine, facts

    rootless_map = ((0, 1500, 1), (1, 1_400_000_000, 65536))
    no_controllers = dict(
        memory_limit=False, swap_limit=False, pids_limit=False, cpu_cfs_quota=False
    )

    def drop(data: dict[str, Any]) -> None:
        for key in ("Memory", "MemorySwap", "NanoCpus", "PidsLimit", "CpuShares"):
            data["HostConfig"][key] = 0

    config = ContainerConfig(images=EngineImages(docker=IMAGE))
    clear_cache()
    try:
        engine = FakeEngine(
            facts(rootless=True, uid_map=rootless_map, gid_map=rootless_map, **no_controllers),
            [IMAGE],
        )
        engine.alter = drop
        arm = ContainerArm(config, engine, host=HOST)  # type: ignore[arg-type]
        admission = arm.admission()
        assert admission.admitted and not admission.limits_enforced
        assert "HostConfig.Memory" in admission.limits_why
        claimed = arm.assurances()
        assert claimed.axes()[Guarantee.RESOURCES] is Kept.NO
        assert claimed.axes()[Guarantee.USER] is Kept.YES
        assert "Resources not kept" in (arm.note() or "")
        creates = [c[1] for c in engine.calls if c[0] == "create"]
        assert "--memory" in creates[0] and "--memory" not in creates[-1]
        clear_cache()
        rootful = FakeEngine(facts(**no_controllers), [IMAGE])
        refused = admit(rootful, config, HOST)  # type: ignore[arg-type]
        assert not refused.admitted and "no support for memory" in refused.reason
    finally:
        clear_cache()
