"""Where the per-user exec server listens, and the checks both ends make before trusting it.

One server per (uid, state directory, engine endpoints, code): the socket's name is a hash of
them, so a client never reaches a server of other code or other engines (those are left
running for their own clients and idle out). The code is the installed files' stamps, not
only the version: an editable install changed under a running server must not be served by
the old code.

The directory is `$XDG_RUNTIME_DIR/sprawl-orch` (when that is ours, 0700) else
`/tmp/sprawl-orch-exec-<uid>`, made 0700; the socket in it 0600. Refused, never used: a
directory or socket that is a link, owned by another uid, or open to group/others -- in /tmp
anyone can make the name first, and a socket planted there would receive the caller's
environment and descriptors.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import struct
from pathlib import Path

# The environment that chooses the state directory and the engines' endpoints.
KEY_NAMES = (
    "XDG_STATE_HOME",
    "HOME",
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "CONTAINER_HOST",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)
ROOTS = ("orchestrator", "guardian", "native_fallbacks")


class Refused(Exception):
    """The server's place can't be trusted or made; the client runs in-process instead."""


def code_stamp() -> str:
    """The installed code: every .py file's path, size and mtime (~200 lstats)."""
    here = Path(__file__).resolve().parent.parent  # the sprawl_orch package
    digest = hashlib.sha256()
    roots = [here] + [here.parent / r for r in ROOTS if (here.parent / r).is_dir()]
    for root in dict.fromkeys(roots):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    st = os.lstat(os.path.join(dirpath, name))
                    digest.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def runtime_dir(environ: dict[str, str]) -> Path:
    uid = os.getuid()
    xdg = environ.get("XDG_RUNTIME_DIR", "")
    base: Path | None = None
    if xdg and os.path.isabs(xdg):
        try:
            st = os.lstat(xdg)
        except OSError:
            # no such runtime dir (a stale variable): /tmp below
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            base = Path(xdg) / "sprawl-orch"
    place = base or Path("/tmp") / f"sprawl-orch-exec-{uid}"
    try:
        os.mkdir(place, 0o700)
    except FileExistsError:  # made before: checked below like a new one
        pass
    except OSError as err:
        raise Refused(f"can't make {place}: {err.strerror}") from err
    check_private(place, stat.S_ISDIR, "directory")
    return place


def check_private(path: Path, kind: object, what: str) -> None:
    """`path` is a `what` (not a link), ours, and nobody else's to open."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not kind(st.st_mode):  # type: ignore[operator]
        raise Refused(f"{path} is not a {what} (a link or another kind): refused")
    if st.st_uid != os.getuid():
        raise Refused(f"{path} belongs to uid {st.st_uid}, not {os.getuid()}: refused")
    if st.st_mode & 0o077:
        raise Refused(f"{path} is open to others (mode {st.st_mode & 0o777:o}): refused")


def socket_path(environ: dict[str, str]) -> Path:
    key = [os.getuid(), code_stamp(), *(environ.get(n, "") for n in KEY_NAMES)]
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
    return runtime_dir(environ) / f"exec-{name}.sock"


def peer_uid(conn: socket.socket) -> int:
    """The connected peer's uid, as the kernel says (SO_PEERCRED: pid, uid, gid)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", raw)[1])
