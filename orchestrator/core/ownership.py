"""Give a copy to another uid without following a link in it: both the container arm (its
container user) and bwrap (a root caller's sandbox uid) hand their copy over this way.

The copy is ours (a scratch directory or a copy slot), so giving it away is safe; this is
never called on the person's tree. Links are not followed: a link in the copy may point
anywhere, and chown must only reach entries inside the copy.
"""

from __future__ import annotations

import os
from pathlib import Path

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
