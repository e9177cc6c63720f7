"""Socket families past the network claim (issue 30, break 5): axis network.

An empty network namespace hides every host address, not every kind of socket: AF_VSOCK is
not namespaced at all (on a machine that is a VM it reaches the hypervisor's services),
and netlink, packet and XDP sockets reach kernel interfaces no address names. io_uring
makes sockets without a `socket()` call (IORING_OP_SOCKET). Every arm that claims network
must refuse them all but inet, inet6, route netlink (and unix where it allows it):
socket_policy.py.

Each probe makes exactly one system call -- `socket(family, type, protocol)` with numbers,
or `io_uring_setup` -- from a static program (sysprobe.py) the probe writes into its working
directory: the container rows' image is busybox, with neither Python nor a compiler, and no
busybox applet opens these families. The program only *creates* the socket: nothing is
connected anywhere, vsock least of all (the host's vsock services are not ours to touch).

What the host sees cannot tell a socket was made, so the probe's word decides (exit 0:
made; an errno: refused; anything else -- the program did not run -- is counted as an
escape: a probe that proves nothing must not pass for a refusal). A probe is applicable
only where the same program, run unconfined by this test's user, makes the socket: a
family this kernel lacks (EAFNOSUPPORT) or this user may not open proves nothing. So the
raw and host controls show every applicable probe escaping.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from functools import cache

from sprawl_orch.core.assurances import Guarantee
from tests.escapes.probe import Probe
from tests.escapes.sysprobe import (
    I386_GETPID,
    I386_SOCKET,
    I386_SOCKETCALL,
    PTR,
    SYS_SOCKET,
    program,
    program32,
    supported,
)

N = Guarantee.NETWORK
SOCKET, SOCKETPAIR, IO_URING_SETUP = 41, 53, 425
X32 = 0x40000000

# name -> (syscall, args): the families the policy refuses, a few of each kind.
CALLS: dict[str, tuple[int, tuple[int, ...]]] = {
    "vsock-stream": (SOCKET, (40, 1, 0)),
    "vsock-dgram": (SOCKET, (40, 2, 0)),
    "vsock-x32": (X32 | SOCKET, (40, 1, 0)),  # the x32 ABI's number for the same call
    "vsock-high-bits": (SOCKET, (0x1_0000_0028, 1, 0)),  # the kernel reads int family
    "vsock-high-proto": (SOCKET, (40, 1, 0x1_0000_0000)),
    "packet": (SOCKET, (17, 3, 0)),
    "packet-dgram": (SOCKET, (17, 2, 0)),
    "xdp": (SOCKET, (44, 3, 0)),
    "netlink-uevent": (SOCKET, (16, 3, 15)),
    "netlink-audit": (SOCKET, (16, 3, 9)),
    "netlink-sock-diag": (SOCKET, (16, 3, 4)),
    "netlink-generic": (SOCKET, (16, 3, 16)),
    "netlink-xfrm": (SOCKET, (16, 3, 6)),
    "netlink-netfilter": (SOCKET, (16, 3, 12)),
    "bluetooth": (SOCKET, (31, 3, 1)),
    "alg": (SOCKET, (38, 5, 0)),
    "key": (SOCKET, (15, 3, 2)),
    "tipc": (SOCKET, (30, 4, 0)),
    "tipc-pair": (SOCKETPAIR, (30, 4, 0, PTR)),
    "rds": (SOCKET, (21, 5, 0)),
    "can": (SOCKET, (29, 3, 1)),
    "smc": (SOCKET, (43, 1, 0)),
    "kcm": (SOCKET, (41, 2, 0)),
    "qipcrtr": (SOCKET, (42, 2, 0)),
    "llc": (SOCKET, (26, 2, 0)),
    "io-uring-setup": (IO_URING_SETUP, (1, PTR)),
    # AF_INET by number, AF_PACKET in the kernel (net/socket.c turns PF_INET SOCK_PACKET
    # into PF_PACKET); needs CAP_NET_RAW where the socket is made -- see CALLS_USERNS
    "inet-sock-packet": (SOCKET, (2, 10, 0x300)),
}
# The same after unshare(CLONE_NEWUSER | CLONE_NEWNET): the command's own user namespace
# gives it CAP_NET_RAW over a network namespace of its own. Measured (attack7): podman's
# default profile lets the unshare through, and socket(AF_INET, SOCK_PACKET, ETH_P_ALL)
# made a packet socket under the policy that allowed AF_INET whatever its type.
UNSHARE, CLONE_NEWUSER_NET = 272, 0x10000000 | 0x40000000
CALLS_USERNS: dict[str, tuple[int, tuple[int, ...]]] = {
    "userns-inet-sock-packet": (SOCKET, (2, 10, 0x300)),
    "userns-inet-sock-packet-nonblock": (SOCKET, (2, 10 | 0o4000, 0x300)),
    "userns-packet": (SOCKET, (17, 3, 0x300)),
    "userns-netlink-uevent": (SOCKET, (16, 3, 15)),
    "userns-vsock": (SOCKET, (40, 1, 0)),
    "userns-io-uring-setup": (IO_URING_SETUP, (1, PTR)),
    # type with upper bits (the kernel reads int type): a masked compare must still see 10
    "userns-inet-sock-packet-high-type": (SOCKET, (2, 0x1_0000_000A, 0x300)),
}


# The same families by the i386 ABI (a 64-bit kernel's IA32 emulation runs it): the direct
# 32-bit socket number, and socketcall(SYS_SOCKET, &args) -- whose arguments a filter cannot
# read: libseccomp turns an allow rule for `socket` with argument checks into socketcall
# allowed whole on x86 (measured: docker's profile with the policy's rules let
# socketcall(AF_VSOCK) through), so the policy refuses the 32-bit ABI whole.
CALLS32: dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]] = {
    "i386-vsock": (I386_SOCKET, (40, 1, 0), ()),
    "i386-socketcall-vsock": (I386_SOCKETCALL, (SYS_SOCKET, PTR), (40, 1, 0)),
    "i386-socketcall-netlink-uevent": (I386_SOCKETCALL, (SYS_SOCKET, PTR), (16, 3, 15)),
    "i386-socketcall-packet": (I386_SOCKETCALL, (SYS_SOCKET, PTR), (17, 3, 0)),
}
# getpid by the i386 ABI: where it does not exit 0 (gVisor runs no 32-bit program; a
# filter refusing the ABI whole kills it), no 32-bit socket can be made either.
I386_CONTROL = "SOCK_I386_CONTROL"


def programs() -> dict[str, bytes]:
    out = {name: program(nr, *args) for name, (nr, args) in CALLS.items()}
    userns = ((UNSHARE, (CLONE_NEWUSER_NET,)),)
    for name, (nr, args) in CALLS_USERNS.items():
        out[name] = program(nr, *args, before=userns)
    for name, (nr, args, packed) in CALLS32.items():
        out[name] = program32(nr, *args, packed=packed)
    return out


def _key(name: str) -> str:
    return "SOCK_" + name.upper().replace("-", "_")


def _run_unconfined(elf: bytes) -> int:
    with tempfile.TemporaryDirectory(prefix="sprawl-sockprobe-") as tmp:
        path = os.path.join(tmp, "p")
        with open(path, "wb") as f:
            f.write(elf)
        os.chmod(path, 0o700)
        return subprocess.run([path], check=False, timeout=30).returncode


@cache
def values() -> dict[str, str]:
    """The bait values: each probe's program (base64), only for the calls that succeed
    unconfined here. Empty on a machine sysprobe can't build for (the class is n/a)."""
    if not supported():
        return {}
    out: dict[str, str] = {}
    for name, elf in programs().items():
        if _run_unconfined(elf) == 0:
            out[_key(name)] = base64.b64encode(elf).decode()
    control = program32(I386_GETPID)
    if _run_unconfined(control) == 0:
        out[I386_CONTROL] = base64.b64encode(control).decode()
    return out


def _write(var: str, key: str) -> str:
    return f"""{var}=./.esc-$id-{var}
echo "@{key}@" | $b base64 -d > "${var}" && $b chmod 700 "${var}"
"""


def _probe(name: str) -> Probe:
    if name in CALLS or name in CALLS_USERNS:
        nr, args = CALLS[name] if name in CALLS else CALLS_USERNS[name]
        call = f"syscall {nr:#x}{tuple(a for a in args if a != PTR)}"
        if name in CALLS_USERNS:
            call = f"unshare(NEWUSER|NEWNET) then {call}"
    else:
        nr, args, packed = CALLS32[name]
        call = f"i386 syscall {nr}{tuple(a for a in args if a != PTR)} args {packed}"
    sh = _write("f", _key(name))
    if name in CALLS32:
        # the ABI refused whole (SIGSYS, SIGTRAP) or absent (gVisor: no 32-bit programs):
        # the control's own exit says so before the call is judged
        sh += (
            _write("c", I386_CONTROL)
            + """"$c"; rc=$?
$b rm -f "$c"
if [ "$rc" != 0 ]; then $b rm -f "$f"; echo "NOT $id the i386 ABI does not run here (getpid: exit $rc)"; exit; fi
"""
        )
    sh += f""""$f"; r=$?
$b rm -f "$f"
if [ "$r" = 0 ]; then echo "ESC $id {call} made a descriptor"
elif [ "$r" -lt 126 ]; then echo "NOT $id {call} refused: errno $r"
elif [ "$r" = 159 ]; then echo "NOT $id {call} killed by seccomp (SIGSYS)"
else echo "ESC $id the probe program did not run (exit $r): it proves nothing"; fi"""
    return Probe(f"sockfam-{name}", "socket families", N, sh)


def probes() -> list[Probe]:
    return [_probe(name) for name in (*CALLS, *CALLS_USERNS, *CALLS32)]
