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

# Re-exported: the container arm's modules import it from here; it lives in core/ so that the
# bwrap arm gives its copy away with the same code without importing the container arm.
from sprawl_orch.core.ownership import own_copy as own_copy


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
