"""The container arm's seccomp profile: the engine's own default plus the socket policy
(socket_policy.py), written by sprawl-orch to a file, passed with `--security-opt
seccomp=FILE` and found again in inspect before start (verify.py).

- docker: the default is compiled into dockerd; its published form is moby_profile.py.
- podman: the default is the file podman itself reads (`podman info`:
  host.security.seccompProfilePath, /usr/share/containers/seccomp.json on Debian).
- runsc: gVisor applies an OCI profile only with its `--oci-seccomp` flag (without it the
  profile sits in the spec and nothing loads it): podman's wrapper passes it (gvisor.py),
  docker's registration must (runtimes.py refuses one without it). Measured here (runsc
  0.0~20221219): gVisor itself refuses AF_VSOCK and AF_XDP, but opens io_uring and
  NETLINK_KOBJECT_UEVENT -- its own refusals are not the policy.

`harden` drops every rule the base has for the syscalls the policy owns and writes the
policy's own rules instead; the base's default action must refuse (a profile whose default
allows could not refuse a family by leaving it out). It also takes every compat ABI out of
`archMap` (i386 and x32 beside x86_64, arm beside aarch64), so their calls are refused whole
(the runtime kills them: SIGSYS), as bwrap's filter refuses them: on x86 libseccomp turns an
allow rule for `socket` that checks its arguments into `socketcall(SYS_SOCKET, ...)` allowed
whole -- the arguments sit behind a pointer -- and an i386 program made an AF_VSOCK socket
through docker's profile with the policy's rules (measured, tests/escapes/probes_sock.py).
For the same reason only hosts whose native ABI has a `socket` syscall of its own are served
(x86_64, aarch64); s390x and ppc64 multiplex sockets through socketcall natively.
What the command may still call otherwise is exactly the engine's default.
"""

from __future__ import annotations

import json
import os
import platform
from functools import cache
from pathlib import Path
from typing import Any

from sprawl_orch.container import moby_profile
from sprawl_orch.core import socket_policy as policy
from sprawl_orch.core.private import ensure_private_file
from sprawl_orch.engines.engine import EngineFacts

PODMAN_DEFAULT = "/usr/share/containers/seccomp.json"
REFUSING = ("SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD")
FILE_PREFIX = "seccomp-"
# Machines whose native ABI has socket(2) itself (no socketcall multiplexer): the policy's
# argument checks hold for every socket the command can make there.
NATIVE_SOCKET_MACHINES = frozenset({"x86_64", "amd64", "aarch64", "arm64"})


class ProfileUnusable(Exception):
    """The engine's default can't be read or made to refuse: the arm must not run."""


def _arg(index: int, value: int) -> dict[str, Any]:
    return {"index": index, "value": value, "op": "SCMP_CMP_EQ"}


def _type(sock_type: int) -> dict[str, Any]:
    """The socket type without its flags (SOCK_NONBLOCK, SOCK_CLOEXEC sit above the mask)."""
    return {
        "index": 1,
        "value": policy.SOCK_TYPE_MASK,
        "valueTwo": sock_type,
        "op": "SCMP_CMP_MASKED_EQ",
    }


def policy_rules(allow_unix: bool = True) -> list[dict[str, Any]]:
    """The socket policy as OCI rules. Several allow rules for one syscall are alternatives
    (libseccomp ORs them); the arguments of one rule must all hold. Every comparison is
    EQ on the whole 64-bit register: a family with stray upper bits does not match and is
    refused by the default action -- the allowlist fails closed."""
    # inet and inet6 only by the types they have: the kernel turns socket(AF_INET,
    # SOCK_PACKET, ...) into an AF_PACKET socket (net/socket.c, "obsolete PF_INET,
    # SOCK_PACKET"), and a command that made a user and network namespace of its own holds
    # CAP_NET_RAW there -- measured under podman's default profile: unshare(CLONE_NEWUSER |
    # CLONE_NEWNET) then socket(AF_INET, SOCK_PACKET, ETH_P_ALL) made a packet socket.
    rules: list[dict[str, Any]] = [
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "args": [_arg(0, f), _type(t)],
        }
        for f in policy.INET_FAMILIES
        for t in policy.INET_TYPES
    ]
    if allow_unix:
        rules.append(
            {"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [_arg(0, policy.AF_UNIX)]}
        )
    rules.append(
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "args": [_arg(0, policy.AF_NETLINK), _arg(2, policy.NETLINK_ROUTE)],
        }
    )
    if allow_unix:
        rules.append(
            {"names": ["socketpair"], "action": "SCMP_ACT_ALLOW", "args": [_arg(0, policy.AF_UNIX)]}
        )
    rules.append(
        {
            "names": list(policy.IO_URING),
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": policy.IO_URING_ERRNO,
        }
    )
    return rules


def harden(base: dict[str, Any], allow_unix: bool = True) -> dict[str, Any]:
    """`base` with the policy's syscalls taken out of every rule and the policy's rules
    added; raises ProfileUnusable when the base's default action does not refuse."""
    default = base.get("defaultAction")
    if default not in REFUSING:
        raise ProfileUnusable(
            f"its defaultAction is {default!r}: a syscall the policy leaves out would be "
            "allowed, not refused"
        )
    rules: list[dict[str, Any]] = []
    for rule in base.get("syscalls") or []:
        names = [n for n in rule.get("names") or [] if n not in policy.OWNED]
        if "name" in rule:  # the pre-1.0 spelling: one name per rule
            if rule["name"] in policy.OWNED:
                continue
            names = [rule["name"], *names]
        if names:
            rules.append({**{k: v for k, v in rule.items() if k != "name"}, "names": names})
    arches = [{**a, "subArchitectures": None} for a in base.get("archMap") or []]
    # The other spelling, `architectures` (a flat list, accepted by podman and docker in
    # place of archMap), is dropped whole: without it the runtime filters the native ABI
    # only. Measured (attack7): a containers.conf seccomp_profile in that spelling, listing
    # SCMP_ARCH_X86, let an i386 socketcall(SYS_SOCKET, AF_VSOCK) make a vsock socket.
    kept = {k: v for k, v in base.items() if k != "architectures"}
    return {**kept, "archMap": arches, "syscalls": [*rules, *policy_rules(allow_unix)]}


def podman_base(path: str) -> dict[str, Any]:
    if not os.path.isabs(path):
        # `podman info` reports containers.conf's seccomp_profile as is: "unconfined" (or a
        # relative name) there means the engine's own default is switched off, and there is
        # no default to add the socket policy to (found by the shaping probe with
        # CONTAINERS_CONF setting seccomp_profile = "unconfined").
        raise ProfileUnusable(
            f"podman's containers.conf sets seccomp_profile = {path!r} (see $CONTAINERS_CONF "
            "and containers.conf(5)): sprawl-orch builds its profile on podman's default "
            "profile file; remove that setting"
        )
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError) as err:
        raise ProfileUnusable(f"podman's default profile {path} could not be read: {err}") from err
    if not isinstance(found, dict):
        raise ProfileUnusable(f"podman's default profile {path} is not a JSON object")
    return found


def profile_for(engine: str, podman_profile: str = "") -> dict[str, Any]:
    """The engine's default made to keep the policy."""
    if engine == "docker":
        return harden(moby_profile.profile())
    return harden(podman_base(podman_profile or PODMAN_DEFAULT))


def text(profile: dict[str, Any]) -> str:
    """The file's bytes: one canonical spelling, so a rewrite is needed only on change."""
    return json.dumps(profile, sort_keys=True, separators=(",", ":")) + "\n"


def ensure_file(directory: Path, engine: str, profile: dict[str, Any]) -> Path:
    """The profile in `directory` (the state dir's `runtimes/`, private like the runsc
    wrapper: the engine loads whatever the file holds), rewritten by atomic rename when
    absent or different."""
    # 0644: podman's conmon/runtime and docker's CLI read it
    return ensure_private_file(
        directory, f"{FILE_PREFIX}{engine}.json", text(profile), 0o644, "a seccomp profile"
    )


def seccomp_problem(engine: str, facts: EngineFacts, machine: str | None = None) -> str | None:
    """Why this engine can't keep the policy (None: it can): seccomp compiled out or off,
    or a machine whose sockets go through socketcall (module docstring)."""
    machine = (machine or platform.machine()).lower()
    if machine not in NATIVE_SOCKET_MACHINES:
        return (
            f"sprawl-orch's socket policy is proved only where socket(2) is a syscall of its "
            f"own (x86_64, aarch64), not on {machine}"
        )
    on = "seccompEnabled" if engine == "podman" else "name=seccomp"
    if any(o == on or o.startswith(on + ",") for o in facts.security_options):
        return None
    return (
        f"{engine} reports no seccomp support ({', '.join(facts.security_options) or 'none'}); "
        "sprawl-orch's seccomp profile (no socket family but inet, inet6, unix and route "
        "netlink; no io_uring) could not be applied"
    )


@cache
def _expected(engine: str, podman_profile: str) -> str:
    return text(profile_for(engine, podman_profile))


def expected_text(engine: str, facts: EngineFacts | None) -> str:
    """The profile's file text for this engine, built once per process."""
    return _expected(engine, facts.seccomp_profile if facts is not None else "")


def write_for(engine: str, facts: EngineFacts, directory: Path) -> str:
    """The profile file every container of this engine is created with; raises
    ProfileUnusable (the engine is refused: nothing could keep the network claim)."""
    problem = seccomp_problem(engine, facts)
    if problem is not None:
        raise ProfileUnusable(problem)
    try:
        return str(ensure_file(directory, engine, json.loads(expected_text(engine, facts))))
    except OSError as err:
        raise ProfileUnusable(
            f"the seccomp profile could not be written in {directory}: {err}"
        ) from err


def file_holds(path: str | None, engine: str, facts: EngineFacts | None, directory: Path) -> bool:
    """A kept admission's profile is still this engine's, at that path (rewritten when it
    was changed: the engine loads whatever the file holds)."""
    if not path or facts is None:
        return False
    try:
        return write_for(engine, facts, directory) == path
    except ProfileUnusable:
        return False
