"""The seccomp program in a real kernel, loaded by a real bwrap: every refusal of
seccomp_filter.py's docstring tried, and what must stay allowed."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest

from sprawl_orch.native_fallbacks.bwrap import bwrap_argv
from sprawl_orch.native_fallbacks.bwrap_view import system_view
from sprawl_orch.native_fallbacks.seccomp_filter import program, program_fd
from tests.integration.conformance import absent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")

# (family, type, protocol, name): families the policy refuses (socket_policy.py), as
# numbers -- Python's socket module lacks some constants, and the kernel's answer without the
# filter decides whether a line proves anything (test_families_refused).
FAMILIES = [
    (40, 1, 0, "vsock"),
    (17, 2, 0, "packet"),
    (44, 3, 0, "xdp"),
    (16, 3, 15, "netlink_uevent"),
    (16, 3, 9, "netlink_audit"),
    (16, 3, 4, "netlink_sock_diag"),
    (16, 3, 16, "netlink_generic"),
    (16, 3, 6, "netlink_xfrm"),
    (31, 3, 1, "bluetooth"),
    (38, 5, 0, "alg"),
    (15, 3, 2, "key"),
    (30, 4, 0, "tipc"),
    (21, 5, 0, "rds"),
    (29, 3, 1, "can"),
    (43, 1, 0, "smc"),
    (41, 2, 0, "kcm"),
]

PROBE = (
    f"FAMILIES = {FAMILIES!r}\n"
    + r"""
import ctypes, errno, mmap, platform, socket
def t(name, f):
    try:
        f()
        print(name, "allowed")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
t("socket_unix", lambda: socket.socket(socket.AF_UNIX))
t("socket_unix_dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
t("socket_inet", lambda: socket.socket(socket.AF_INET))
t("socket_inet6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
t("netlink_route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
t("netlink_route_dgram", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0))
t("pair_stream", lambda: socket.socketpair())
t("pair_seqpacket", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))
t("pair_dgram", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
t("pair_raw", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW))
t("pair_dgram_flags", lambda: socket.socketpair(socket.AF_UNIX,
  socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
x86 = platform.machine() == "x86_64"
nr_socket = 41 if x86 else 198
def raw(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    print(name, "allowed" if r >= 0 else errno.errorcode.get(e, e))
raw("socket_high_bits", nr_socket, 0x100000001, 1, 0)
raw("socket_inet_high_bits", nr_socket, 0x100000002, 1, 0)
for fam, typ, proto, name in FAMILIES:
    raw("family_" + name, nr_socket, fam, typ, proto)
raw("io_uring_setup", 425, 8, ctypes.addressof(ctypes.create_string_buffer(120)))
raw("io_uring_enter", 426, 0, 0, 0, 0, 0, 0)
raw("io_uring_register", 427, 0, 0, 0, 0)
if x86:
    raw("x32_socket", 0x40000000 | 41, 1, 1, 0)
"""
)


@pytest.fixture(scope="module")
def ran() -> dict[str, str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        absent("bwrap", "not installed (apt-get install bubblewrap)")
    assert bwrap is not None
    fd = program_fd()
    try:
        argv = bwrap_argv(bwrap, system_view(), None, "/", ["python3", "-c", PROBE], seccomp_fd=fd)
        # The interpreter of this test run, whatever prefix it lives in.
        prefix = os.path.realpath(sys.base_prefix)
        argv[argv.index("--chdir") : argv.index("--chdir")] = ["--ro-bind", prefix, prefix]
        argv[-3] = os.path.join(prefix, "bin", "python3")
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, pass_fds=(fd,), check=False
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


REFUSED = {
    "socket_unix": "EPERM",
    "socket_unix_dgram": "EPERM",
    "pair_dgram": "EPERM",
    "pair_raw": "EPERM",
    "pair_dgram_flags": "EPERM",
    "socket_high_bits": "EPERM",
    "io_uring_setup": "ENOSYS",
    "io_uring_enter": "ENOSYS",
    "io_uring_register": "ENOSYS",
}
X86_REFUSED = {"x32_socket": "ENOSYS"}
ALLOWED = (
    "socket_inet",
    "socket_inet6",
    "socket_inet_high_bits",
    "netlink_route",
    "netlink_route_dgram",
    "pair_stream",
    "pair_seqpacket",
)


def unconfined() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=30, check=False
    )
    return dict(ln.split(" ", 1) for ln in done.stdout.splitlines())


def test_families_refused(ran: dict[str, str]) -> None:
    """Every family the kernel gives this user unconfined is refused by the filter (EPERM,
    the filter's word; the kernel's own answer for an absent family is EAFNOSUPPORT). A
    family the kernel lacks proves nothing here; at least vsock, packet or netlink must be
    there (they are on every kernel these tests run on)."""
    baseline = unconfined()
    names = ["family_" + f[3] for f in FAMILIES]
    there = [n for n in names if baseline[n] == "allowed"]
    assert there, f"no family opens even unconfined: {baseline}"
    assert {n: ran[n] for n in there} == dict.fromkeys(there, "EPERM")
    # the rest: whatever the kernel says, never a socket
    assert all(ran[n] != "allowed" for n in names)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused(ran: dict[str, str], name: str) -> None:
    assert ran[name] == REFUSED[name]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 is x86_64's")
@pytest.mark.parametrize("name", sorted(X86_REFUSED))
def test_foreign_abis_refused(ran: dict[str, str], name: str) -> None:
    # Only observable where the kernel has the x32 ABI (CONFIG_X86_X32_ABI): without the
    # filter the same call must get further than ENOSYS, or the line proves nothing.
    baseline = unconfined()
    if baseline.get(name) == "ENOSYS":
        pytest.skip("this kernel has no x32 ABI: the filter's x32 line cannot be observed")
    assert ran[name] == X86_REFUSED[name]


@pytest.mark.parametrize("name", ALLOWED)
def test_still_allowed(ran: dict[str, str], name: str) -> None:
    # An AF_INET socket can be made; the empty network namespace is what stops it.
    assert ran[name] == "allowed"


def test_the_program_is_built_once_per_process() -> None:
    assert program() is program()


# The filter loaded straight into a child (no bwrap): run by root, the kernel itself would
# make the socket (CAP_NET_RAW), so an EPERM is the filter's word. (PF_INET, SOCK_PACKET)
# is an AF_PACKET socket in the kernel (net/socket.c); a command with CAP_NET_RAW in a user
# namespace of its own could make it under a policy that allowed AF_INET of any type.
LOADED = r"""
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def packet(flags=0):
    r = libc.syscall(ctypes.c_long(41), ctypes.c_long(2), ctypes.c_long(10 | flags),
                     ctypes.c_long(0x300))
    return "allowed" if r >= 0 else errno.errorcode.get(ctypes.get_errno())
print("unconfined", packet())
prog = os.read(int(sys.argv[1]), 1 << 16)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
fp = Fprog(len(prog) // 8, prog)
assert libc.prctl(22, 2, ctypes.byref(fp), 0, 0) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER
print("filtered", packet())
print("filtered_nonblock", packet(0o4000))
print("inet_stream", "allowed" if socket.socket(socket.AF_INET) else "no")
"""


def _under_the_filter(script: str) -> dict[str, str]:
    """Run `script` in a child that loads the bwrap arm's filter itself (fd in argv[1]);
    its "name value" lines as a dict."""
    fd = program_fd()
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, str(fd)],
            capture_output=True,
            text=True,
            timeout=30,
            pass_fds=(fd,),
            check=False,
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def test_inet_sock_packet_refused_by_the_filter_itself() -> None:
    if platform.machine() != "x86_64":
        absent("x86_64", "the probe calls socket by its x86_64 number")
    got = _under_the_filter(LOADED)
    if got["unconfined"] != "allowed":
        absent("CAP_NET_RAW", f"socket(AF_INET, SOCK_PACKET) unconfined: {got['unconfined']}")
    assert got["filtered"] == "EPERM" and got["filtered_nonblock"] == "EPERM", got
    assert got["inet_stream"] == "allowed", got


KEYRING = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def session():
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create=0), x86_64's number 250
    r = libc.syscall(ctypes.c_long(250), ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))
    return "allowed" if r >= 0 else errno.errorcode.get(ctypes.get_errno())
print("unconfined", session())
prog = os.read(int(sys.argv[1]), 1 << 16)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
fp = Fprog(len(prog) // 8, prog)
assert libc.prctl(22, 2, ctypes.byref(fp), 0, 0) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER
print("filtered", session())
"""


def test_the_callers_keyring_is_out_of_reach_under_the_filter() -> None:
    """attack7: keyctl answered under bwrap -- keyrings are not namespaced and the command
    possessed the caller's session keyring. The filter refuses add_key/request_key/keyctl."""
    if platform.machine() != "x86_64":
        absent("x86_64", "the probe calls keyctl by its x86_64 number")
    got = _under_the_filter(KEYRING)
    # The control: unconfined, the same call reaches the session keyring.
    assert got["unconfined"] == "allowed", got
    assert got["filtered"] == "EPERM", got
