"""The proxy's listener made inside a sandbox's own network namespace (egress/netns.py), for
real under bwrap: made by a thread of ours that enters the namespace and comes back, while
bwrap is still setting that namespace up — the program then reaches it on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from sprawl_orch.egress.netns import listener_in
from tests.integration.conftest import missing


@pytest.fixture(scope="module")
def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    return found


def _held(bwrap: str, port: int) -> tuple[subprocess.Popen[bytes], int, int]:
    """bwrap with its own network namespace, held on --block-fd; its program connects to
    127.0.0.1:port and reads one line. Returns (process, child pid, block fd)."""
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    script = (
        f"import socket; s = socket.create_connection(('127.0.0.1', {port}), 5); "
        "print(s.makefile().readline().strip())"
    )
    argv = [bwrap, "--unshare-net", "--unshare-user", "--ro-bind", "/", "/", "--dev", "/dev"]
    argv += ["--proc", "/proc", "--info-fd", str(info_w), "--block-fd", str(block_r)]
    argv += ["--", "python3", "-I", "-c", script]
    child = subprocess.Popen(argv, pass_fds=(info_w, block_r), stdout=subprocess.PIPE)
    os.close(info_w)
    os.close(block_r)
    with os.fdopen(info_r, "rb") as info:
        pid = json.loads(info.read())["child-pid"]
    return child, pid, block_w


def test_listener_made_at_once_is_reached_every_time(bwrap: str) -> None:
    """Twenty times, the listener made the moment bwrap names its child (before bwrap has
    raised the namespace's loopback: raising it first made bwrap fail, 'Failed
    RTM_NEWADDR', and the program never ran); each program reaches it."""
    home = os.stat("/proc/thread-self/ns/net").st_ino
    for turn in range(20):
        child, pid, block = _held(bwrap, 3128)
        listener = listener_in(pid)
        assert os.stat(f"/proc/{pid}/ns/net").st_ino != home

        def answer(listener: socket.socket = listener) -> None:
            with listener, listener.accept()[0] as conn:
                conn.sendall(b"reached the host's side\n")

        server = threading.Thread(target=answer)
        server.start()
        os.write(block, b"g")
        os.close(block)
        out, _ = child.communicate(timeout=60)
        server.join(60)
        assert child.returncode == 0 and out.strip() == b"reached the host's side", turn
    # The thread that entered each namespace went back (or died there): ours never moved.
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    probe = socket.create_server(("127.0.0.1", 0))  # still the host's loopback
    probe.close()


CHANGES = """
import ipaddress, subprocess
from sprawl_orch.egress.addresses import _OwnAddresses
own = _OwnAddresses()
new = ipaddress.ip_address("198.51.100.77")
before = own.get()
assert own.get() is before  # nothing changed: the same set, not read again
subprocess.run(["ip", "addr", "add", "198.51.100.77/32", "dev", "lo"], check=True)
assert new in own.get() and new not in before
subprocess.run(["ip", "addr", "del", "198.51.100.77/32", "dev", "lo"], check=True)
assert new not in own.get()
print("ok")
"""


def test_own_addresses_follow_a_change_at_once() -> None:
    """The host's addresses are read again right after the kernel reports a change (an
    address added, then removed), in a network namespace of the test's own (unshare -rn)."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            missing(f"{tool} is not installed")
    done = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", CHANGES],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
