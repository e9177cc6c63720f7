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
import threading

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
    if not join_user:
        return _by_thread(pid, port)
    return _by_helper(pid, port, join_user)


def _by_thread(pid: int, port: int) -> socket.socket:
    """setns(CLONE_NEWNET) moves only the calling thread (a network namespace, unlike a user
    namespace, may be joined by one thread of many): a short-lived thread of ours enters,
    makes the listener and goes back, without the helper interpreter's start (29 ms on a
    quiet machine, 119-173 ms under the other sessions' load: benchmarks/egress_proxy.py)."""
    made: list[socket.socket] = []
    failed: list[str] = []

    def run() -> None:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            made.append(enter.listen_in(pid, port, join_user=False))
        except OSError as err:
            failed.append(f"{type(err).__name__}: {err}")
        finally:
            try:
                enter.setns_fd(home, enter.CLONE_NEWNET)
            except OSError as err:
                # The thread ends now whatever happens, and nothing else runs on it: the
                # namespace it stays in dies with it. Said, so a listener is not trusted.
                failed.append(f"could not return to the host's namespace: {err}")
            os.close(home)

    thread = threading.Thread(target=run, name="sprawl-egress-setns")
    thread.start()
    thread.join()
    if failed:
        for sock in made:
            sock.close()
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            subject=f"network namespace of pid {pid}",
            detail=f"could not make the proxy's listener inside the sandbox: {failed[0]}",
            recovery="run without [sandbox.network] allow, or report this with the message",
        )
    return made[0]


def _by_helper(pid: int, port: int, join_user: bool) -> socket.socket:
    """A fresh single-threaded interpreter (enter.py): joining a user namespace needs one."""
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
