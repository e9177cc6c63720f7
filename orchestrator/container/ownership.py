"""Make the copy writable for the container's user (design §1: "arrange the copy's
ownership for it, never touching the source tree").

The copy is ours (a scratch directory), so giving it to the configured uid:gid is safe;
this is never called on the person's tree. Links are not followed: a link in the copy
may point anywhere, and chown must only reach entries inside the copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from sprawl_orch.container.userns import Userns
from sprawl_orch.core.errors import ErrorCode, SprawlError


def own_copy(root: Path, uid: int, gid: int) -> int:
    """lchown every entry under `root` (itself included) to uid:gid; return how many
    changed. Entries already owned so are left alone (a resync touches few)."""
    changed = 0

    def own(path: str, st: os.stat_result) -> None:
        nonlocal changed
        if st.st_uid != uid or st.st_gid != gid:
            os.lchown(path, uid, gid)
            changed += 1

    try:
        own(str(root), os.lstat(root))
        stack = [str(root)]
        while stack:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    own(entry.path, entry.stat(follow_symlinks=False))
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    except PermissionError as err:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            str(root),
            f"cannot give the copy to the container user {uid}:{gid}: {err.strerror} "
            f"({err.filename}); this process runs as uid {os.geteuid()}",
            "run sprawl-orch as root for a rootful engine, or set [sandbox.container] user "
            f'= "{os.geteuid()}:{os.getegid()}"',
        ) from err
    return changed


def _rootless_caller(engine: object, userns: Userns | None) -> Callable[[list[str]], None] | None:
    """`podman unshare` when the command's uids are the caller's subordinate ones and the
    caller is not root: only inside the engine's user namespace may it chown to them."""
    if userns is None or userns.mode != "rootless" or os.geteuid() == 0:
        return None
    unshare = getattr(engine, "unshare", None)
    return unshare if callable(unshare) else None


def given_away(userns: Userns | None) -> bool:
    """The copy, once given to the command, is out of the caller's reach until taken back:
    a rootless caller gives it to one of its subordinate uids, and the copy's 0700
    directories then refuse the caller itself (EACCES on the exec tool's stamp walk)."""
    return userns is not None and userns.mode == "rootless" and os.geteuid() != 0


def give_copy(
    engine: object, userns: Userns | None, copy: Path, owner: tuple[int, int], user: tuple[int, int]
) -> bool:
    """The copy to the command's host uid:gid `owner` (container ids `user`). A rootless
    caller goes through its engine's namespace: `chown -R -h` to the container ids. True
    unless no entry was re-owned (chown(1) may touch every entry: True)."""
    unshare = _rootless_caller(engine, userns)
    if unshare is None:
        return own_copy(copy, *owner) > 0
    unshare(["chown", "-R", "-h", f"{user[0]}:{user[1]}", str(copy)])
    return True


def take_back(engine: object, userns: Userns | None, copy: Path) -> None:
    """A rootless caller gets its copy back when the command is over (container root is
    the caller): otherwise files the command made are its subordinate uid's, and the
    caller could neither resync nor delete them."""
    unshare = _rootless_caller(engine, userns)
    if unshare is not None and copy.exists():
        unshare(["chown", "-R", "-h", "0:0", str(copy)])
