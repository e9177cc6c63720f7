"""The container arm's seccomp profile (container/seccomp_profile.py): the engine's default
with the socket policy's rules in place of its own, written privately, and found again in
inspect (verify.py) -- pure parts. Its effect in a real kernel under every engine is
tests/integration/test_socket_policy.py and the escape suite's socket families class."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container import moby_profile, seccomp_profile
from sprawl_orch.container.argv import HostLimits, create_argv
from sprawl_orch.container.seccomp_profile import ProfileUnusable, harden, policy_rules
from sprawl_orch.container.verify import Expected, mismatches
from sprawl_orch.core import socket_policy as policy
from tests.unit.container_fake import facts, inspect_from_argv

HOST = HostLimits({"nofile": 4096, "nproc": 4096}, 2, 8 * 1024**3)
IMAGE = "sha256:" + "a" * 64
# A podman-shaped base (containers/common 0.50): socket allowed by capability-dependent
# rules, socketcall and socketpair allowed, io_uring absent.
PODMAN_LIKE: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "syscalls": [
        {"names": ["read", "socketcall", "socketpair", "write"], "action": "SCMP_ACT_ALLOW"},
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": 16, "op": "SCMP_CMP_NE"}],
            "excludes": {"caps": ["CAP_AUDIT_WRITE"]},
        },
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_AUDIT_WRITE"]},
        },
        {"name": "io_uring_setup", "action": "SCMP_ACT_ALLOW"},  # the old one-name spelling
    ],
}


def rules_for(profile: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [r for r in profile["syscalls"] if name in r["names"]]


@pytest.mark.parametrize("base", [moby_profile.profile(), PODMAN_LIKE], ids=["moby", "podman-like"])
def test_only_the_policys_rules_name_the_syscalls_it_owns(base: dict[str, Any]) -> None:
    hardened = harden(base)
    ours = policy_rules()
    for name in policy.OWNED:
        assert rules_for(hardened, name) == [r for r in ours if name in r["names"]], name
    assert not rules_for(hardened, "socketcall")  # refused by the default: args unreadable
    for name in policy.IO_URING:
        (rule,) = rules_for(hardened, name)
        assert rule["action"] == "SCMP_ACT_ERRNO" and rule["errnoRet"] == 38


def test_socket_is_allowed_for_exactly_the_policys_families() -> None:
    socket_rules = rules_for(harden(moby_profile.profile()), "socket")
    assert all(r["action"] == "SCMP_ACT_ALLOW" for r in socket_rules)
    allowed = sorted(
        tuple((a["index"], a["value"], a.get("valueTwo", 0), a["op"]) for a in r["args"])
        for r in socket_rules
    )
    # inet and inet6 by type, SOCK_PACKET (10) never: the kernel makes it AF_PACKET
    inet = [
        ((0, family, 0, "SCMP_CMP_EQ"), (1, 0xF, t, "SCMP_CMP_MASKED_EQ"))
        for family in (2, 10)
        for t in (1, 2, 3, 5)
    ]
    assert allowed == sorted(
        [
            ((0, 1, 0, "SCMP_CMP_EQ"),),  # AF_UNIX: the container's own namespace
            *inet,
            ((0, 16, 0, "SCMP_CMP_EQ"), (2, 0, 0, "SCMP_CMP_EQ")),  # NETLINK_ROUTE only
        ]
    )
    (pair,) = rules_for(harden(moby_profile.profile()), "socketpair")
    assert pair["args"] == [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]
    no_unix = rules_for(harden(moby_profile.profile(), allow_unix=False), "socket")
    assert all(r["args"][0]["value"] != 1 for r in no_unix)


def test_everything_else_is_the_engines_default() -> None:
    base = moby_profile.profile()
    hardened = harden(base)
    for key in ("defaultAction", "defaultErrnoRet"):
        assert hardened[key] == base[key]
    # the native architectures stay; every compat ABI goes (refused whole: on x86 an allow
    # rule for socket() with argument checks would let socketcall(SYS_SOCKET) through)
    assert [a["architecture"] for a in hardened["archMap"]] == [
        a["architecture"] for a in base["archMap"]
    ]
    assert all(a["subArchitectures"] is None for a in hardened["archMap"])
    kept = [r for r in base["syscalls"] if not set(r["names"]) <= policy.OWNED]
    before = {(n, r["action"], json.dumps(r.get("args"))) for r in kept for n in r["names"]}
    after = {
        (n, r["action"], json.dumps(r.get("args")))
        for r in hardened["syscalls"]
        for n in r["names"]
    }
    assert {b for b in before if b[0] not in policy.OWNED} <= after
    assert "ptrace" in [n for r in hardened["syscalls"] for n in r["names"]]


def test_moby_base_is_the_published_shape() -> None:
    base = moby_profile.profile()
    assert base["defaultAction"] == "SCMP_ACT_ERRNO" and base["defaultErrnoRet"] == 1
    names = moby_profile.ALLOWED
    assert len(names) == len(set(names)) and {"read", "execve", "io_uring_setup"} <= set(names)
    assert base["archMap"][0] == {
        "architecture": "SCMP_ARCH_X86_64",
        "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    }


@pytest.mark.parametrize("default", ["SCMP_ACT_ALLOW", "SCMP_ACT_LOG", None])
def test_a_base_whose_default_allows_is_refused(default: str | None) -> None:
    with pytest.raises(ProfileUnusable, match="defaultAction"):
        harden({"defaultAction": default, "syscalls": []})


def test_podmans_file_is_read_from_where_podman_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "seccomp.json"
    path.write_text(json.dumps(PODMAN_LIKE))
    made = seccomp_profile.profile_for("podman", str(path))
    assert made == harden(PODMAN_LIKE)
    with pytest.raises(ProfileUnusable, match="could not be read"):
        seccomp_profile.profile_for("podman", str(tmp_path / "absent.json"))
    path.write_text("[]")
    with pytest.raises(ProfileUnusable, match="not a JSON object"):
        seccomp_profile.profile_for("podman", str(path))


def test_a_machine_whose_sockets_go_through_socketcall_is_refused() -> None:
    for machine in ("s390x", "ppc64le", "i686"):
        problem = seccomp_profile.seccomp_problem("docker", facts(), machine)
        assert problem is not None and machine in problem
    assert seccomp_profile.seccomp_problem("docker", facts(), "x86_64") is None
    assert seccomp_profile.seccomp_problem("docker", facts(), "aarch64") is None


def test_an_engine_without_seccomp_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileUnusable, match="no seccomp support"):
        seccomp_profile.write_for("docker", facts(security_options=()), tmp_path / "r")
    with pytest.raises(ProfileUnusable, match="no seccomp support"):
        seccomp_profile.write_for("podman", facts(security_options=("apparmorEnabled",)), tmp_path)


def test_the_file_is_rewritten_when_changed_and_only_in_a_private_dir(tmp_path: Path) -> None:
    where = tmp_path / "runtimes"
    path = Path(seccomp_profile.write_for("docker", facts(), where))
    assert oct(where.stat().st_mode & 0o777) == "0o700"
    assert json.loads(path.read_text()) == harden(moby_profile.profile())
    path.write_text('{"defaultAction": "SCMP_ACT_ALLOW"}')  # tampered
    assert seccomp_profile.file_holds(str(path), "docker", facts(), where)
    assert json.loads(path.read_text()) == harden(moby_profile.profile())
    assert not seccomp_profile.file_holds(None, "docker", facts(), where)  # kept before 30
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    os.chmod(open_dir, 0o777)
    with pytest.raises(ProfileUnusable, match="private"):
        seccomp_profile.write_for("docker", facts(), open_dir)


def _created(tmp_path: Path, engine: str = "docker") -> tuple[Expected, dict[str, Any]]:
    copy = tmp_path / "copy"
    copy.mkdir(exist_ok=True)
    profile = seccomp_profile.write_for("docker", facts(), tmp_path / "runtimes")
    argv = create_argv(
        "docker",
        ContainerConfig(),
        IMAGE,
        copy,
        ["true"],
        [],
        "t1",
        "s",
        "r",
        None,
        host=HOST,
        seccomp=profile,
    )
    assert ("--security-opt", f"seccomp={profile}") in itertools.pairwise(argv)
    expected = Expected.of(engine, ContainerConfig(), HOST, IMAGE, copy, "runc", seccomp=profile)
    return expected, inspect_from_argv(argv, "runc")


def fields(expected: Expected, inspect: dict[str, Any]) -> list[str]:
    return [m.field for m in mismatches(expected, inspect)]


def test_inspect_must_hold_our_profile(tmp_path: Path) -> None:
    expected, inspect = _created(tmp_path)
    assert fields(expected, inspect) == []  # docker: the file's JSON, inline
    opts: list[str] = inspect["HostConfig"]["SecurityOpt"]
    for found in (
        ["no-new-privileges"],  # the engine's default profile: no AF_VSOCK refusal
        ["no-new-privileges", "seccomp=unconfined"],
        ["no-new-privileges", 'seccomp={"defaultAction":"SCMP_ACT_ALLOW"}'],
        ["no-new-privileges", "seccomp=not json"],
        [*opts, opts[-1]],  # two profiles: which one ran is not ours to guess
        ["no-new-privileges", f"seccomp={expected.seccomp}"],  # a path is podman's spelling
    ):
        inspect["HostConfig"]["SecurityOpt"] = found
        assert "seccomp" in fields(expected, inspect), found


def test_podman_reports_the_path(tmp_path: Path) -> None:
    expected, inspect = _created(tmp_path, "podman")
    inspect["HostConfig"]["SecurityOpt"] = ["no-new-privileges", f"seccomp={expected.seccomp}"]
    assert "seccomp" not in fields(expected, inspect)
    inspect["HostConfig"]["SecurityOpt"] = ["no-new-privileges", "seccomp=/elsewhere.json"]
    assert "seccomp" in fields(expected, inspect)


def test_no_profile_asked_no_profile_checked(tmp_path: Path) -> None:
    _expected, inspect = _created(tmp_path)
    plain = Expected.of("docker", ContainerConfig(), HOST, IMAGE, tmp_path / "copy", "runc")
    assert plain.seccomp == "" and "seccomp" not in fields(plain, inspect)


def test_a_flat_architectures_list_is_dropped_with_the_compat_abis() -> None:
    """podman and docker take `architectures` in place of `archMap`; a base in that spelling
    (containers.conf seccomp_profile is the caller's) must not bring the i386 ABI back."""
    base = {k: v for k, v in moby_profile.profile().items() if k != "archMap"}
    base["architectures"] = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    hardened = harden(base)
    assert "architectures" not in hardened
    assert all(not a.get("subArchitectures") for a in hardened["archMap"])
