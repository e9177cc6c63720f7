"""`python -I -S enter.py PID FD PORT [user]`: the short-lived helper that makes a
listener inside another process's network namespace and hands it back.

A socket stays in the network namespace it was created in, whichever process later holds it:
so this helper enters the target's namespace with setns(2), brings its loopback up if it is
still down (bwrap raises it only after reporting the child's pid), binds 127.0.0.1:PORT,
listens, and sends the fd over the unix socket FD with SCM_RIGHTS. setns needs a
single-threaded process — a fresh interpreter is — and, for a namespace owned by a user
namespace we hold no capability over (rootless podman), that user namespace joined first.
Python 3.11 has no os.setns (3.12 does): libc's, through ctypes. Only the standard library is
imported, so the helper costs one interpreter start.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import sys
import time

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
RTMGRP_IPV4_IFADDR = 0x10
# How long a loopback that is down is left to its own sandbox to raise (bwrap: milliseconds).
LOOPBACK_WAIT = 5.0


def setns_fd(fd: int, kind: int, path: str = "") -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, kind) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns({path or fd}): {os.strerror(code)}")


def _setns(path: str, kind: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns_fd(fd, kind, path)
    finally:
        os.close(fd)


def _loopback_up(sock: socket.socket) -> None:
    request = struct.pack("16sH22x", b"lo", 0)
    flags = struct.unpack("16sH22x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
    if not flags & IFF_UP:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _loopback_is_up(sock: socket.socket) -> bool:
    request = struct.pack("16sH22x", b"lo", 0)
    return bool(struct.unpack("16sH22x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1] & IFF_UP)


def _bind_when_up(listener: socket.socket, port: int, wait: float) -> None:
    """Bind 127.0.0.1:`port` once the namespace's loopback is up. bwrap reports the child's
    pid before the child raises its loopback: raised here first, bwrap's own RTM_NEWADDR
    then failed ("bwrap: loopback: Failed RTM_NEWADDR") and the command never ran — a race
    the helper's slow start had hidden. So the link and address events are awaited (netlink,
    subscribed before the first try, so none is missed); only a loopback still down after
    `wait` seconds (an engine that never raises it) is raised here."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as events:
        events.bind((0, RTMGRP_LINK | RTMGRP_IPV4_IFADDR))
        deadline = time.monotonic() + wait
        while True:
            try:
                listener.bind(("127.0.0.1", port))
                return
            except OSError as err:
                if err.errno != errno.EADDRNOTAVAIL:
                    raise
            left = deadline - time.monotonic()
            if left <= 0 or _loopback_is_up(listener):
                _loopback_up(listener)
                listener.bind(("127.0.0.1", port))
                return
            events.settimeout(left)
            try:
                events.recv(65536)
            except TimeoutError:
                # The deadline passed without an event: the next turn raises it ourselves.
                continue


def listen_in(pid: int, port: int, join_user: bool) -> socket.socket:
    if join_user:
        # A user namespace cannot be joined by a process that shares its fs (threads) or
        # re-joined as the one we are in: EINVAL then means "already there".
        try:
            _setns(f"/proc/{pid}/ns/user", CLONE_NEWUSER)
        except OSError as err:
            if err.errno != errno.EINVAL:
                raise
    _setns(f"/proc/{pid}/ns/net", CLONE_NEWNET)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _bind_when_up(listener, port, LOOPBACK_WAIT)
    listener.listen(128)
    return listener


def main(args: list[str]) -> int:
    pid, channel, port = int(args[0]), int(args[1]), int(args[2])
    join_user = len(args) > 3 and args[3] == "user"
    back = socket.socket(fileno=channel)
    try:
        listener = listen_in(pid, port, join_user)
    except OSError as err:
        back.sendall(f"{type(err).__name__}: {err}".encode())
        return 1
    socket.send_fds(back, [b"ok"], [listener.fileno()])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
