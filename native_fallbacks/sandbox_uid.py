"""A principal of its own for a root caller's bwrap (issue 14 item 4, design §1 "user").

When the caller is root, bwrap is started as a uid of sprawl-orch's own -- not root, not
`nobody`, no account in passwd/group, outside every /etc/subuid and /etc/subgid range
(rootless engines, podman --userns=auto and docker's userns-remap hand those out) -- so
bwrap runs unprivileged and the command's processes are that uid on the host: nothing
root-owned is writable or connectable through owner rights. One uid serves every command
of every root caller: commands never see each other (each has its own pid, mount and
network namespaces, and only its own copy in its view).

That uid must reach two kinds of host paths while bwrap sets the sandbox up: the copy
(kept in the caller's state directory, e.g. under /root, mode 0700) and the read-only
tool directories of the view (e.g. /root/.pyenv). bwrap 0.8 resolves even `--bind-fd`
sources by path ("Can't find source path /proc/self/fd/3: Permission denied"), so an fd
opened by root does not help. Each directory on the way that the uid cannot search gets a
POSIX ACL entry granting *that uid alone* search (x) -- not read, and not to anyone else;
a chmod o+x would open the way to every account. The only process that ever runs as the
uid outside a mount namespace is the bwrap we start, with our arguments; the command
itself sees none of these directories but its view. The entries stay (idempotent; a
second grant finds them).

The copy is given to the uid (lchown, never following links: container/ownership.py);
the person's tree is never touched.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError

# The range sprawl-orch takes its uid from: far above the usual subordinate ranges
# (100000+ in steps of 65536; this machine's `containers` range is 1e9..1.27e9), below
# 2**31 (tools that read uids as signed ints), and skipping any taken id.
RANGE_START = 0x7E000000
RANGE_SIZE = 65536

ACL_XATTR = "system.posix_acl_access"
ACL_VERSION = 2
ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_OTHER = 1, 2, 4, 8, 16, 32
ACL_UNDEFINED_ID = 0xFFFFFFFF
_X = 1


def _ids(text: str) -> set[int]:
    """uid and gid columns of a passwd or group file."""
    out: set[int] = set()
    for line in text.splitlines():
        fields = line.split(":")
        for field in fields[2:4]:
            if field.isdigit():
                out.add(int(field))
    return out


def _ranges(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for line in text.splitlines():
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            out.append((int(fields[1]), int(fields[1]) + int(fields[2])))
    return out


def choose_uid(passwd: str, group: str, subids: Iterable[str]) -> int:
    """The first id of our range that no account, group or subordinate range holds."""
    taken = _ids(passwd) | _ids(group)
    ranges = [r for text in subids for r in _ranges(text)]
    for uid in range(RANGE_START, RANGE_START + RANGE_SIZE):
        if uid not in taken and not any(lo <= uid < hi for lo, hi in ranges):
            return uid
    raise SprawlError(
        ErrorCode.SANDBOX_DENIED,
        "sandbox uid",
        f"every id in {RANGE_START}..{RANGE_START + RANGE_SIZE - 1} is an account, a group "
        "or inside an /etc/subuid or /etc/subgid range",
        "free part of that range, or run sprawl-orch as a non-root user",
    )


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


@cache
def sandbox_uid() -> int:
    """This machine's choice, sampled once per process."""
    return choose_uid(
        _read("/etc/passwd"), _read("/etc/group"), [_read("/etc/subuid"), _read("/etc/subgid")]
    )


# -- search access for the uid -------------------------------------------------------
_Entry = tuple[int, int, int]  # (tag, perm, id)


def _acl_of(path: str, st: os.stat_result) -> list[_Entry]:
    try:
        raw = os.getxattr(path, ACL_XATTR, follow_symlinks=False)
    except OSError as err:
        if err.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        raw = b""
    if len(raw) >= 4 and struct.unpack_from("<I", raw)[0] == ACL_VERSION:
        return [(t, p, i) for t, p, i in struct.iter_unpack("<HHI", raw[4:])]
    mode = stat.S_IMODE(st.st_mode)
    return [
        (ACL_USER_OBJ, (mode >> 6) & 7, ACL_UNDEFINED_ID),
        (ACL_GROUP_OBJ, (mode >> 3) & 7, ACL_UNDEFINED_ID),
        (ACL_OTHER, mode & 7, ACL_UNDEFINED_ID),
    ]


def can_search(st: os.stat_result, acl: list[_Entry], uid: int) -> bool:
    """POSIX.1e access check for `uid` (gid = uid, no groups) asking for x."""
    if st.st_uid == uid:
        return bool((st.st_mode >> 6) & _X)
    mask = next((p for t, p, _ in acl if t == ACL_MASK), 7)
    named = next((p for t, p, i in acl if t == ACL_USER and i == uid), None)
    if named is not None:
        return bool(named & mask & _X)
    if st.st_gid == uid:
        return bool((st.st_mode >> 3) & _X)
    return bool(stat.S_IMODE(st.st_mode) & _X)


def with_search(acl: list[_Entry], uid: int) -> list[_Entry]:
    """`acl` plus search for `uid`: its named entry gets x, the mask gets x (a mask is
    required once a named entry exists; a new one carries the group class's union, so
    no other entry's effective rights change -- except x for entries that had it masked,
    on a directory that already had a mask without x)."""
    entries = [e for e in acl if not (e[0] == ACL_USER and e[2] == uid)]
    named = next((p for t, p, i in acl if t == ACL_USER and i == uid), 0)
    entries.append((ACL_USER, named | _X, uid))
    mask = next((p for t, p, _ in acl if t == ACL_MASK), None)
    if mask is None:
        mask = 0
        for t, p, _ in entries:
            if t in (ACL_GROUP_OBJ, ACL_USER, ACL_GROUP):
                mask |= p
    entries = [e for e in entries if e[0] != ACL_MASK]
    entries.append((ACL_MASK, mask | _X, ACL_UNDEFINED_ID))
    return sorted(entries, key=lambda e: (e[0], e[2]))


def _pack(acl: list[_Entry]) -> bytes:
    return struct.pack("<I", ACL_VERSION) + b"".join(struct.pack("<HHI", *e) for e in acl)


def grant_search(path: Path, uid: int, *more: Path) -> int:
    """Let `uid` search every directory from / down to `path` (and each of `more`): a named
    ACL entry where it cannot already. Returns how many directories were changed."""
    changed = 0
    parts = sorted(
        {Path(*p.parts[:n]) for p in (path, *more) for n in range(1, len(p.parts) + 1)},
        key=lambda d: len(d.parts),
    )
    # Checked every time, never cached: a chmod rewrites the ACL mask (a plain chmod 0700
    # masks our entry out -- pytest does exactly that to /tmp/pytest-of-root at every session
    # start), and ctime is too coarse (a jiffy on ext4) to say "unchanged since we looked".
    # A stat and a getxattr per directory: ~0.2 ms for a view's few dozen directories.
    for directory in parts:
        try:
            st = os.stat(directory)
            if not stat.S_ISDIR(st.st_mode):
                continue
            acl = _acl_of(str(directory), st)
            if not can_search(st, acl, uid):
                os.setxattr(directory, ACL_XATTR, _pack(with_search(acl, uid)))
                changed += 1
        except FileNotFoundError:
            continue
        except OSError as err:
            raise SprawlError(
                ErrorCode.SANDBOX_DENIED,
                str(directory),
                f"cannot let the sandbox uid {uid} pass through {directory}: "
                f"{err.strerror} (a POSIX ACL entry, setxattr {ACL_XATTR})",
                "use a filesystem with POSIX ACLs for the state directory and tools, or set "
                "[state] dir to a directory every user can pass through (mode 0711)",
            ) from err
    return changed
