"""Before `apply` writes anything: is each chosen change still safe to bring in? (design §5)

A change is refused when the working directory's entry changed since the command's sync (a
conflict: both stamps named), when a link sits on the way to it or at it (apply never writes
through or over a link), when a link it would create resolves out of the tree, or when it is
something apply never makes (a fifo, socket or device) or whose bytes were not kept.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from sprawl_orch.changes.changes import ChangeEntry
from sprawl_orch.changes.record import kind_of, norm_mode, sha256_of
from sprawl_orch.changes.store import Kept
from sprawl_orch.core.beneath import NotBeneath, open_dir_beneath, parts_of

_LINK_HOPS = 40  # the kernel's own limit on links met in one resolution


@dataclass(frozen=True)
class Verdict:
    why: str
    at_sync: dict[str, int] | None = None
    now: dict[str, int] | None = None
    already: bool = False  # the working directory already holds exactly the change


def _stamp_dict(s: list[int] | tuple[int, ...]) -> dict[str, int]:
    return {
        "mode": s[0],
        "size": s[1],
        "mtime_ns": s[2],
        "ctime_ns": s[3],
        "ino": s[4],
        "dev": s[5],
    }


def _lstat(root_fd: int, rel: str, planned: set[str]) -> os.stat_result | None:
    """The entry at ``rel`` now, links never followed; None if it (or a parent this apply will
    make) is absent. NotBeneath when a parent is a link or not a directory."""
    parts = parts_of(rel)
    have = len(parts) - 1
    while have > 0 and "/".join(parts[:have]) in planned:
        have -= 1
    try:
        fd = open_dir_beneath(root_fd, parts[:have])
    except FileNotFoundError:
        raise NotBeneath(f"the directory of {rel} is gone from the working directory") from None
    try:
        name = parts[have] if have < len(parts) - 1 else parts[-1]
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            return None
        if have < len(parts) - 1:
            raise NotBeneath(
                f"{'/'.join(parts[: have + 1])} appeared in the working directory since the sync"
            )
        return st
    finally:
        os.close(fd)


def up_after_name(target: str) -> bool:
    """Whether ``target`` climbs (``..``) after naming something: ``Y/../x`` leaves the tree
    as soon as ``Y`` becomes a link to ``.`` (in this apply, a later one, or by the person),
    though it looks inside while ``Y`` is a directory or absent."""
    named = False
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part != "..":
            named = True
        elif named:
            return True
    return False


def link_stays_inside(
    root_fd: int, rel: str, target: str, planned: Mapping[str, str | None] | None = None
) -> bool:
    """Whether a link at ``rel`` pointing at ``target`` resolves inside the tree, following the
    tree's own links step by step (a component that does not exist yet is taken as named).
    ``planned``: what this apply makes of other paths (a link's target, or None: not a link),
    taken over what the tree holds now -- a link the same apply writes is followed too. A
    link to its own directory or one above it is refused as well."""
    if target.startswith("/") or up_after_name(target):
        return False
    planned = planned or {}
    todo = target.split("/")
    where = rel.split("/")[:-1]
    hops = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not where:
                return False
            where.pop()
            continue
        where.append(part)
        here = "/".join(where)
        if here in planned:
            inner: str | None = planned[here]
        else:
            inner = _link_now(root_fd, where)
        if inner is not None:
            hops += 1
            if hops > _LINK_HOPS or inner.startswith("/"):
                return False
            where.pop()
            todo = inner.split("/") + todo
    # A link to its own directory or one above it (`Y -> .`, `d/up -> ..`) makes every
    # `Y/..` climb one level more than it reads: a link `p -> Y/../x` the person already has
    # would then lead out of the tree. (A link across, `d/l -> ../e`, does too for
    # `d/l/../..`; such a link is common in workspaces and is still applied.)
    own = rel.split("/")[:-1]
    return own[: len(where)] != where


def _link_now(root_fd: int, where: list[str]) -> str | None:
    """The target of the tree's link at ``where`` now; None when it is not a link (or not
    there yet: taken as named)."""
    try:
        fd = open_dir_beneath(root_fd, where[:-1])
    except (OSError, NotBeneath):
        return None
    try:
        if stat.S_ISLNK(os.lstat(where[-1], dir_fd=fd).st_mode):
            return os.readlink(where[-1], dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    return None


def check(
    kept: Kept,
    root_fd: int,
    e: ChangeEntry,
    planned: set[str],
    links: Mapping[str, str | None] | None = None,
) -> Verdict | None:
    verdict = _check(kept, root_fd, e, planned, links or {})
    if verdict is not None and verdict.why.startswith("conflict") and _is_new(kept, root_fd, e):
        return Verdict("found already applied", already=True)
    return verdict


def _is_new(kept: Kept, root_fd: int, e: ChangeEntry) -> bool:
    """Whether the path already is what the change makes it (an interrupted apply wrote it)."""
    try:
        now = _lstat(root_fd, e.path, set())
    except NotBeneath:
        return False
    if e.change == "deleted":
        return now is None
    if now is None or kind_of(now.st_mode) != e.kind:
        return False
    if e.mode and e.kind != "link" and f"{stat.S_IMODE(now.st_mode):04o}" != e.mode:
        return False
    if e.kind == "link":
        parts = parts_of(e.path)
        fd = open_dir_beneath(root_fd, parts[:-1])
        try:
            return os.readlink(parts[-1], dir_fd=fd) == e.target
        finally:
            os.close(fd)
    if e.kind == "file" and e.change != "mode_changed":
        blob = kept.blob(e.path)
        return blob is not None and sha256_of_beneath(root_fd, e.path) == sha256_of(blob)
    return True


def _check(
    kept: Kept, root_fd: int, e: ChangeEntry, planned: set[str], links: Mapping[str, str | None]
) -> Verdict | None:
    if e.kind == "other":
        return Verdict("a fifo, socket or device file is never applied")
    if e.kind == "file" and e.change != "mode_changed" and kept.blob(e.path) is None:
        return Verdict("its new bytes were not kept (see the command's changes.note)")
    if e.kind == "link" and not link_stays_inside(root_fd, e.path, e.target or "", links):
        return Verdict(
            f"the link's target {e.target!r} leads out of the working "
            "directory, climbs with '..' after a name (a link at that name turns "
            "it outward) or points at its own directory or above (which turns "
            "every '..' through it outward); a link is applied only if it stays "
            "inside the tree"
        )
    try:
        now = _lstat(root_fd, e.path, planned)
    except NotBeneath as err:
        return Verdict(f"{err}; apply never writes through a link")
    recorded = kept.source.get(e.path)
    if e.change == "created":
        if now is not None:
            return Verdict(
                "conflict: the working directory has this path now, and had not "
                "at the command's sync",
                None,
                _stamp_dict(_t(now)),
            )
        return None
    if recorded is None:
        return Verdict(
            "conflict: no stamp of it was taken before the sync (it appeared while "
            "the sync ran), so it cannot be shown unchanged",
            None,
            _stamp_dict(_t(now)) if now else None,
        )
    at_sync = _stamp_dict(recorded)
    if now is None:
        return Verdict("conflict: deleted from the working directory since the sync", at_sync)
    if stat.S_ISLNK(now.st_mode):
        return Verdict(
            "the working directory has a symbolic link here; apply never writes over a link",
            at_sync,
            _stamp_dict(_t(now)),
        )
    mine = _t(now)
    if e.was_kind == "dir":
        same = stat.S_ISDIR(now.st_mode) and (mine[0], mine[4], mine[5]) == (
            recorded[0],
            recorded[4],
            recorded[5],
        )
    elif mine == tuple(recorded) and recorded[3] < kept.source_trusted_below_ns:
        same = True
    elif e.path in kept.hashes and stat.S_ISREG(now.st_mode):
        same = sha256_of_beneath(root_fd, e.path) == kept.hashes[e.path]
    else:
        same = False
        if mine == tuple(recorded):
            return Verdict(
                "conflict: its stamp is too recent to prove it unchanged since the "
                "sync, and its bytes were not hashed",
                at_sync,
                _stamp_dict(mine),
            )
    if not same:
        return Verdict(
            "conflict: changed in the working directory since the command's sync",
            at_sync,
            _stamp_dict(mine),
        )
    if e.change == "mode_changed" and not stat.S_ISDIR(now.st_mode) and now.st_nlink > 1:
        return Verdict(shared_inode(now.st_nlink), at_sync, _stamp_dict(mine))
    return None


def shared_inode(links: int) -> str:
    """Why a mode change is refused on a file with hard links: a mode belongs to the inode,
    so a chmod would change the other names too, which may lie outside the tree."""
    return (
        f"the file has {links} hard links (names possibly outside the working directory, "
        "e.g. a package store); its mode is the inode's, so changing it here would change "
        "them all: change it by hand if you mean that"
    )


def sha256_of_beneath(root_fd: int, rel: str) -> str | None:
    parts = parts_of(rel)
    try:
        fd = open_dir_beneath(root_fd, parts[:-1])
    except (OSError, NotBeneath):
        return None
    try:
        return sha256_of(f"/proc/self/fd/{fd}/{parts[-1]}")
    finally:
        os.close(fd)


def _t(st: os.stat_result) -> tuple[int, int, int, int, int, int]:
    return (norm_mode(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def check_all(kept: Kept, root_fd: int, todo: list[ChangeEntry]) -> dict[str, Verdict | None]:
    planned = {e.path for e in todo if e.kind == "dir" and e.change in ("created", "kind_changed")}
    # What this apply makes of each path it writes: followed instead of the tree's entry
    # now (a link written beside another can lead out through it: Y -> ., X -> Y/../x).
    links: dict[str, str | None] = {
        e.path: (e.target or "") if e.kind == "link" and e.change != "deleted" else None
        for e in todo
        if e.change != "mode_changed"
    }
    verdicts = {e.path: check(kept, root_fd, e, planned, links) for e in todo}
    # A directory the apply would make is only made if something chosen needs it or it was
    # chosen itself; a refused parent refuses what is beneath it.
    for e in todo:
        parts = e.path.split("/")
        for i in range(1, len(parts)):
            anc = "/".join(parts[:i])
            if anc in planned and verdicts.get(anc) is not None and verdicts[e.path] is None:
                verdicts[e.path] = Verdict(f"its directory {anc} is refused")
    return verdicts
