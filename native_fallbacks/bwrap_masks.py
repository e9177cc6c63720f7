"""Secrets' files (issue 25) the bwrap arm's read-only view would show: /etc, /opt, /usr and tool
directories are bound whole, so `file = "/opt/app/token"` (world-readable, or a non-root
caller's own 0600 file: the command runs as that uid) was one `cat` away from the value
(tests/integration/test_secret_file_view.py). Each place the view shows it at is covered by
an empty read-only file (bwrap.py: `--ro-bind /dev/null PATH`, after the view).

Only where the command could reach it: bwrap mounts as the uid the command runs as, and a
mask under a directory that uid cannot search (a root caller's /opt/app, mode 0700) failed
the sandbox's setup, where the file was out of reach anyway.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.native_fallbacks.bwrap_view import View


def _searchable(path: str, user: int | None) -> bool:
    """Whether the command's uid can pass through directory `path`. The caller's own uid
    (`user` None): access(2), ACLs included. A root caller's sandbox uid, which no account
    holds and no ACL of the person's names: the mode's bits (sandbox_uid.py's search grants,
    on the way to each bind, are counted by _reachable)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if user is None:
        return os.access(path, os.X_OK)
    if st.st_uid == user:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == user:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _reachable(real: str, source: str, user: int | None, granted: Sequence[str]) -> bool:
    """Whether every directory from the bind's source down to the file's lets `user` pass. A
    directory on the way to another bind (a tool directory nested in /opt) counts as
    passable: sandbox_uid.py grants search there by an ACL the mode does not show."""
    parts = os.path.relpath(os.path.dirname(real), source).split(os.sep)
    at = source
    for part in [p for p in parts if p not in ("", ".")]:
        at = os.path.join(at, part)
        on_the_way = any(g == at or g.startswith(at.rstrip("/") + "/") for g in granted)
        if not on_the_way and not _searchable(at, user):
            return False
    return True


def masks_for(view: View, hidden: Sequence[str], user: int | None) -> tuple[str, ...]:
    """Where each hidden host file (a secret's `file`, its real path) appears in the view and
    the command's uid (`user`; None: the caller's) can reach it, to be masked.
    E_SANDBOX_DENIED for one with more than one hard link: its other names could lie
    anywhere in the view (one under $HOME, another under /opt), where no path-based mask
    reaches."""
    out: list[str] = []
    granted = [os.path.realpath(b) for b in view.binds]
    for real in hidden:
        try:
            links = os.stat(real).st_nlink
        except OSError:
            continue  # gone since it was read: nothing left to read inside either
        if links > 1:
            raise SprawlError(
                ErrorCode.SANDBOX_DENIED,
                "bwrap",
                f"a secret's file {real} has {links} hard links: another name for it could "
                "lie in the command's read-only view (/etc, /opt, tool directories)",
                "keep the value in a file with one link (under $HOME: private inside), or "
                "read it from the environment",
            )
        out += [
            inside
            for inside, source in view.seen_at(real)
            if _reachable(real, source, user, granted)
        ]
    return tuple(dict.fromkeys(out))
