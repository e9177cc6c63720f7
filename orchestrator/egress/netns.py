"""A listener on 127.0.0.1 inside a sandbox's own network namespace, for the host's proxy.

The sandbox keeps no route out (`--network none`, bwrap's `--unshare-net`): the only thing it
can reach is this listener, whose accepted connections arrive in the host's proxy. Checked on
this machine (tests/integration/test_egress_netns.py): docker (runc), rootful podman, podman
`--userns=auto`, bwrap. Not on gVisor: runsc's guest loopback is its own netstack, and a
socket bound in the sandbox's host-side namespace is never reached from inside.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress import enter

# The port inside the sandbox's (empty) namespace; fixed because the command's environment
# (HTTP_PROXY=...) is written before the namespace exists.
PROXY_PORT = 3128


def _other_user_ns(pid: int) -> bool:
    return os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino


def listener_in(pid: int, port: int = PROXY_PORT) -> socket.socket:
    """A listening socket bound to 127.0.0.1:`port` in the network namespace of `pid`.
    The user namespace is joined first only when we are not root (rootless podman):
    root holds CAP_SYS_ADMIN over every namespace already."""
    join_user = os.geteuid() != 0 and _other_user_ns(pid)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        # By path with -I -S: enter.py imports only the standard library, and skipping site
        # and the package's import saves part of the interpreter start this step costs.
        argv = [sys.executable, "-I", "-S", enter.__file__, str(pid), str(theirs.fileno())]
        argv += [str(port)] + (["user"] if join_user else [])
        done = subprocess.run(
            argv, pass_fds=(theirs.fileno(),), capture_output=True, text=True, timeout=60
        )
        theirs.close()
        message, fds, _flags, _addr = socket.recv_fds(ours, 4096, 1)
    if done.returncode != 0 or message != b"ok" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        said = message.decode(errors="replace") or done.stderr.strip()[-400:]
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            subject=f"network namespace of pid {pid}",
            detail=f"could not make the proxy's listener inside the sandbox: {said}",
            recovery="run without [sandbox.network] allow, or report this with the message",
        )
    return socket.socket(fileno=fds[0])
