"""User namespaces of the container arm (design §1 user axis): which host uid a container's
uid really is, and the ranges reserved for it.

Three ways a container's uids become a principal of their own here, each measured:

- podman `--userns=auto:size=65536` (rootful): podman picks, per container, 65536 uids
  from the `containers` entry of /etc/subuid and /etc/subgid that no other container
  uses; the chosen map is in `podman inspect` as `HostConfig.IDMappings` (UidMap
  "0:1000000000:65536"), known right after create, so the copy is given to the mapped
  uid between create and start.
- docker `--userns-remap`: every container of that daemon shares one map, the remap
  user's /etc/subuid ranges in ascending order (docker 20.10 idtools.createIDMap);
  `docker info` names no map, but its data root ends in "<uid>.<gid>" of container root.
- rootless podman: `podman info` lists the map (container 0 = the caller, 1.. = the
  caller's subordinate range), identical for every container.

An `IdMap` maps container ids to host ids; `host_id` refuses an id the map lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Every podman container gets this many uids: enough for the image's ids and for the
# default command user 65534 (nobody), which must be inside the map.
PODMAN_AUTO_SIZE = 65536
PODMAN_AUTO = f"auto:size={PODMAN_AUTO_SIZE}"
# The account rootful podman takes --userns=auto ranges from (containers-storage default).
PODMAN_AUTO_USER = "containers"
SUBUID = Path("/etc/subuid")
SUBGID = Path("/etc/subgid")
_ROOT_DIR_IDS = re.compile(r"/([0-9]+)\.([0-9]+)/?$")


@dataclass(frozen=True)
class IdRange:
    container: int
    host: int
    size: int

    def text(self) -> str:
        return f"{self.container}:{self.host}:{self.size}"


@dataclass(frozen=True)
class IdMap:
    ranges: tuple[IdRange, ...]

    def host_id(self, container_id: int) -> int | None:
        for r in self.ranges:
            if r.container <= container_id < r.container + r.size:
                return r.host + container_id - r.container
        return None

    def text(self) -> list[str]:
        return [r.text() for r in self.ranges]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> IdMap:
        """From podman inspect's "container:host:size" strings."""
        ranges = []
        for entry in entries:
            c, h, n = (int(x) for x in str(entry).split(":"))
            ranges.append(IdRange(c, h, n))
        return cls(tuple(ranges))

    @classmethod
    def of(cls, triples: Iterable[tuple[int, int, int]]) -> IdMap:
        """From (container, host, size) triples (EngineFacts.uid_map)."""
        return cls(tuple(IdRange(c, h, n) for c, h, n in triples))

    @classmethod
    def from_subordinate(cls, ranges: Sequence[range]) -> IdMap:
        """docker userns-remap: the remap user's ranges, ascending, laid end to end from
        container id 0 (docker 20.10 idtools.createIDMap)."""
        out, next_id = [], 0
        for r in sorted(ranges, key=lambda r: r.start):
            out.append(IdRange(next_id, r.start, len(r)))
            next_id += len(r)
        return cls(tuple(out))


def _slot(base: int, allowed: Sequence[range]) -> bool:
    """`base` starts one of the size-PODMAN_AUTO_SIZE slots podman auto hands out."""
    return any(
        base >= r.start
        and base + PODMAN_AUTO_SIZE <= r.stop
        and (base - r.start) % PODMAN_AUTO_SIZE == 0
        for r in allowed
    )


def subordinate(user: str, path: Path) -> list[range]:
    """`user`'s ranges in /etc/subuid or /etc/subgid (name:start:count lines)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        # no subuid/subgid file: the account has no subordinate ranges
        return []
    found = []
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] == user and parts[1].isdigit() and parts[2].isdigit():
            start, count = int(parts[1]), int(parts[2])
            found.append(range(start, start + count))
    return found


def owner_of(path: Path, start: int) -> str | None:
    """The account whose subordinate range in `path` begins at `start`."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        # no subuid/subgid file: no account owns the range
        return None
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1] == str(start):
            return parts[0]
    return None


def within(idmap: IdMap, allowed: Sequence[range]) -> bool:
    """Every host id of the map lies in one of the `allowed` ranges."""
    return bool(idmap.ranges) and all(
        any(r.host >= a.start and r.host + r.size <= a.stop for a in allowed) for r in idmap.ranges
    )


@dataclass(frozen=True)
class Userns:
    """The user namespace an admitted engine puts every container in.

    `flag`: what create passes as `--userns=<flag>` (podman auto), else None.
    `uid_map`/`gid_map`: the fixed map (remap, rootless); None when it is chosen per
    container and read from inspect (podman auto).
    `allowed_uids`/`allowed_gids`: host ranges a per-container map must lie in.
    """

    mode: str  # "podman-auto" | "docker-remap" | "rootless"
    why: str
    flag: str | None = None
    uid_map: IdMap | None = None
    gid_map: IdMap | None = None
    allowed_uids: tuple[range, ...] = ()
    allowed_gids: tuple[range, ...] = ()

    def flags(
        self, owner: tuple[int, int] | None = None, user: tuple[int, int] = (65534, 65534)
    ) -> tuple[str, ...]:
        """Create flags for a command whose copy is owned by `owner` (host uid:gid).

        podman --userns=auto gives every container a fresh range. `owner` is given only
        while another container holds the copy (a still-running command in the same copy):
        that range is then named explicitly with --uidmap/--gidmap (podman's auto
        allocation avoids it while in use), so two commands in one copy at once are one
        principal and the second one's chown does not take the copy from the first
        mid-run. Never for a copy nothing runs in: podman may have given its old range to
        another copy's command since (container/arm.py userns_flags)."""
        if self.flag is None:
            return ()
        if owner is not None:
            base_u, base_g = owner[0] - user[0], owner[1] - user[1]
            if _slot(base_u, self.allowed_uids) and _slot(base_g, self.allowed_gids):
                return (
                    "--uidmap",
                    f"0:{base_u}:{PODMAN_AUTO_SIZE}",
                    "--gidmap",
                    f"0:{base_g}:{PODMAN_AUTO_SIZE}",
                )
        return ("--userns", self.flag)

    def to_json(self) -> dict[str, Any]:
        """Everything, for admission evidence kept on disk (ranges as [start, stop])."""

        def maps(m: IdMap | None) -> list[list[int]] | None:
            return None if m is None else [[r.container, r.host, r.size] for r in m.ranges]

        return {
            "mode": self.mode,
            "why": self.why,
            "flag": self.flag,
            "uid_map": maps(self.uid_map),
            "gid_map": maps(self.gid_map),
            "allowed_uids": [[r.start, r.stop] for r in self.allowed_uids],
            "allowed_gids": [[r.start, r.stop] for r in self.allowed_gids],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Userns | None:
        if data is None:
            return None

        def maps(m: Sequence[Sequence[int]] | None) -> IdMap | None:
            return None if m is None else IdMap.of((int(c), int(h), int(n)) for c, h, n in m)

        return cls(
            str(data["mode"]),
            str(data["why"]),
            data.get("flag"),
            maps(data.get("uid_map")),
            maps(data.get("gid_map")),
            tuple(range(int(a), int(b)) for a, b in data.get("allowed_uids") or ()),
            tuple(range(int(a), int(b)) for a, b in data.get("allowed_gids") or ()),
        )

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode}
        if self.flag:
            out["flag"] = f"--userns={self.flag}"
        if self.uid_map is not None:
            out["uid_map"] = self.uid_map.text()
        if self.allowed_uids:
            out["host_ranges"] = [f"{r.start}+{len(r)}" for r in self.allowed_uids]
        return out


def podman_auto(subuid: Path = SUBUID, subgid: Path = SUBGID) -> Userns | None:
    """podman --userns=auto, when /etc/subuid and /etc/subgid reserve ranges for it."""
    uids = subordinate(PODMAN_AUTO_USER, subuid)
    gids = subordinate(PODMAN_AUTO_USER, subgid)
    if not uids or not gids:
        return None
    ranges = ", ".join(f"{r.start}+{len(r)}" for r in uids)
    return Userns(
        "podman-auto",
        f"podman --userns={PODMAN_AUTO}: each container gets {PODMAN_AUTO_SIZE} uids "
        f"from the {PODMAN_AUTO_USER!r} subordinate range ({ranges}) that no container of "
        "another copy holds (commands in one copy at once share them), no host account",
        flag=PODMAN_AUTO,
        allowed_uids=tuple(uids),
        allowed_gids=tuple(gids),
    )


def podman_auto_missing() -> str:
    return (
        f"no {PODMAN_AUTO_USER!r} ranges in {SUBUID} and {SUBGID} for podman "
        f'--userns=auto (add e.g. "{PODMAN_AUTO_USER}:1000000000:268435456" to both)'
    )


def docker_remap(
    root_dir: str,
    subuid: Path = SUBUID,
    subgid: Path = SUBGID,
) -> tuple[Userns | None, str]:
    """docker userns-remap's map from the daemon's data root "<…>/<uid>.<gid>" and the
    remap user's ranges; (None, why) when they can't be read."""
    found = _ROOT_DIR_IDS.search(root_dir)
    if found is None:
        return None, f"docker reports userns-remap but its root dir {root_dir!r} names no uid.gid"
    uid0, gid0 = int(found.group(1)), int(found.group(2))
    user, group = owner_of(subuid, uid0), owner_of(subgid, gid0)
    if user is None or group is None:
        return None, (
            f"docker remaps container root to {uid0}:{gid0}, but no account in "
            f"{subuid}/{subgid} has a range starting there"
        )
    uids, gids = subordinate(user, subuid), subordinate(group, subgid)
    uid_map, gid_map = IdMap.from_subordinate(uids), IdMap.from_subordinate(gids)
    ranges = ", ".join(f"{r.start}+{len(r)}" for r in uids)
    return Userns(
        "docker-remap",
        f"docker userns-remap: container uids map onto the subordinate range of {user!r} "
        f"({ranges}), no host account; every container of that daemon shares the range, "
        "each in namespaces of its own, seeing only its own copy",
        uid_map=uid_map,
        gid_map=gid_map,
        allowed_uids=tuple(uids),
        allowed_gids=tuple(gids),
    ), ""


def rootless(
    uid_map: Sequence[tuple[int, int, int]], gid_map: Sequence[tuple[int, int, int]], engine: str
) -> Userns | None:
    uids, gids = IdMap.of(uid_map), IdMap.of(gid_map)
    if not uids.ranges or not gids.ranges:
        return None

    def subs(m: IdMap) -> tuple[range, ...]:
        return tuple(range(r.host, r.host + r.size) for r in m.ranges if r.container > 0)

    return Userns(
        "rootless",
        f"{engine} runs rootless: container uid 0 is the caller, every other container uid "
        f"maps onto the caller's subordinate range ({', '.join(uids.text())})",
        uid_map=uids,
        gid_map=gids,
        allowed_uids=subs(uids),
        allowed_gids=subs(gids),
    )


def inspect_maps(inspect: Mapping[str, Any]) -> tuple[IdMap, IdMap]:
    """podman inspect's per-container map (HostConfig.IDMappings); empty when none."""
    found = (inspect.get("HostConfig") or {}).get("IDMappings") or {}
    return IdMap.parse(found.get("UidMap") or ()), IdMap.parse(found.get("GidMap") or ())


def maps_for(userns: Userns, inspect: Mapping[str, Any]) -> tuple[IdMap, IdMap]:
    if userns.uid_map is not None and userns.gid_map is not None:
        return userns.uid_map, userns.gid_map
    return inspect_maps(inspect)


def mapping_problem(
    userns: Userns, uid: int, gid: int, inspect: Mapping[str, Any]
) -> tuple[str, str] | None:
    """(expected, found) when the container's map is not the one this mode promises: a
    per-container map (podman auto) must exist, lie inside the reserved ranges and map
    the command's uid and gid."""
    if userns.uid_map is not None:
        mode = str((inspect.get("HostConfig") or {}).get("UsernsMode") or "")
        if mode == "host":
            return "the daemon's user namespace", "UsernsMode host"
        return None
    uids, gids = inspect_maps(inspect)
    want = (
        f"uid/gid maps inside {[f'{r.start}+{len(r)}' for r in userns.allowed_uids]} "
        f"mapping {uid}:{gid}"
    )
    found = f"UidMap {uids.text()}, GidMap {gids.text()}"
    if not within(uids, userns.allowed_uids) or not within(gids, userns.allowed_gids):
        return want, found
    if uids.host_id(uid) is None or gids.host_id(gid) is None:
        return want, found
    return None


def host_owner(
    userns: Userns | None, uid: int, gid: int, inspect: Mapping[str, Any]
) -> tuple[int, int]:
    """The host uid:gid the command's uid:gid is (what the copy is given to)."""
    if userns is None:
        return uid, gid
    uids, gids = maps_for(userns, inspect)
    host_uid, host_gid = uids.host_id(uid), gids.host_id(gid)
    if host_uid is None or host_gid is None:
        raise ValueError(f"{uid}:{gid} is outside the container's map {uids.text()}")
    return host_uid, host_gid


def plan(
    engine: str,
    rootless_engine: bool,
    remap: bool,
    root_dir: str,
    uid_map: Sequence[tuple[int, int, int]],
    gid_map: Sequence[tuple[int, int, int]],
    asked: str,
) -> tuple[Userns | None, str]:
    """The user namespace this engine would put commands in, or (None, why not).
    `asked` is [sandbox.container] userns: "auto", "required" or "off"."""
    if rootless_engine:
        found = rootless(uid_map, gid_map, engine)
        return (found, "") if found else (None, f"{engine} runs rootless but lists no id map")
    if engine == "docker" and remap:
        return docker_remap(root_dir)
    if engine == "podman" and asked != "off":
        found = podman_auto()
        return (found, "") if found else (None, podman_auto_missing())
    if engine == "podman":
        return None, 'user namespaces are turned off ([sandbox.container] userns = "off")'
    return None, (
        "docker runs rootful without userns-remap, so the container's uid is the "
        "same number on the host and may be shared with other host principals "
        "(start a dockerd with --userns-remap=default, or use podman)"
    )


def principal_problem(host_uid: int) -> str | None:
    """Why `host_uid` is not a principal of its own (design §1): the caller, root, or an
    account in the host's passwd — a subordinate range that overlaps real accounts
    would otherwise be claimed as "no host account"."""
    import os
    import pwd

    if host_uid in (0, os.getuid()):
        return f"the command's uid maps onto host uid {host_uid}: root or the caller"
    try:
        account = pwd.getpwuid(host_uid).pw_name
    except KeyError:
        return None
    return f"the command's uid maps onto host uid {host_uid}, the host account {account!r}"
