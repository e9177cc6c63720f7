"""The seccomp program bwrap loads (`--seccomp FD`): the socket policy (socket_policy.py)
for an arm without AF_UNIX -- no socket family but inet, inet6 and route netlink -- and no
io_uring.

Defence in depth behind the explicit view (bwrap_view.py): even if a unix socket is visible
in the sandbox, the command cannot make a socket to connect to it. The same idea as
Anthropic's sandbox-runtime (a BPF program refusing `socket(AF_UNIX, ...)`, handed to bwrap).
And past the empty network namespace: `socket(AF_VSOCK)` is not namespaced (it reached the
hypervisor's services from a sandbox on a VM, issue 30), nor are half the other families.

What the program refuses, and the bypass each line closes:

- `socket(family, ...)` -> EPERM for every family but AF_INET, AF_INET6 and AF_NETLINK
  with protocol NETLINK_ROUTE (glibc's getaddrinfo and `ip` read it): AF_UNIX, AF_VSOCK,
  AF_PACKET, AF_XDP, every other netlink protocol, and any family a kernel adds later.
  Only the low 32 bits of the family and protocol are compared: the kernel reads `int
  family`, so comparing all 64 bits (libseccomp's plain `SCMP_CMP_EQ` on a 64-bit arch)
  would let a refusal miss `socket(0x100000001, ...)` -- an AF_UNIX socket.
- `socket(AF_INET or AF_INET6, type)` -> EPERM unless the type (flags masked off) is
  stream, dgram, raw or seqpacket: the kernel turns (PF_INET, SOCK_PACKET) into an
  AF_PACKET socket, which a command holding CAP_NET_RAW in a user namespace of its own
  could make (it did under podman's default profile, attack7).
- `socketpair(AF_UNIX, SOCK_DGRAM | SOCK_RAW, ...)` -> EPERM; SOCK_STREAM and SOCK_SEQPACKET
  pairs stay allowed (pipes between the command's own processes). A datagram socket from a
  pair can still `sendto()`/`connect()` a pathname address (trpc-agent-go#2426 found this
  hole in a filter that allowed every socketpair); a connected stream socket cannot
  (EISCONN). The kernel turns AF_UNIX SOCK_RAW into SOCK_DGRAM, so only the two stream
  types are let through, whatever the flags (SOCK_NONBLOCK/SOCK_CLOEXEC are masked off).
- `io_uring_setup/enter/register` -> ENOSYS: IORING_OP_SOCKET (Linux >= 5.19) creates a
  socket without any `socket()` syscall for seccomp to see (the bypass filed against many
  seccomp-based sandboxes, e.g. BaseIntelligence/bounty-challenge#19309). ENOSYS makes
  libraries (libuv, tokio) fall back to epoll.
- a foreign syscall ABI -> ENOSYS: 32-bit `int 0x80` syscalls arrive with AUDIT_ARCH_I386
  and a different numbering (socketcall(2) multiplexes socket()); x32 syscalls arrive as
  AUDIT_ARCH_X86_64 with bit 30 set. Both are refused whole: checked before any number.

Why a BPF program built here, not libseccomp: the program is thirty instructions for the
two architectures we know the numbers of (x86_64, aarch64; anything else: the arm refuses,
`SeccompUnsupported`), and the subtle parts (the 32-bit compare, the x32 bit, the foreign
ABI) are exactly what must be visible and tested, not defaults of a binding. The Python
bindings on offer are Debian's python3-seccomp, which exists only for the system
interpreter (not a venv's or pyenv's), and `pyseccomp`, a ctypes binding last released in
2021 (0.1.2) -- a dependency that brings a C library's arch tables but not one of the
three decisions above. The bytes are built once per process (`program()` is cached);
each command only writes them into a fresh memfd (`program_fd()`), ~10 µs.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
from dataclasses import dataclass
from functools import cache

from sprawl_orch.core import socket_policy as policy

# <linux/filter.h>, <linux/seccomp.h>, <linux/audit.h>
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_AND_K = 0x54
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
X32_SYSCALL_BIT = 0x40000000
AF_UNIX = policy.AF_UNIX
SOCK_STREAM = 1
SOCK_SEQPACKET = 5
SOCK_TYPE_MASK = 0xF
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
# Little-endian (both arches below): the low half of args[i] is at 16 + 8*i.
_NR, _ARCH, _ARG0_LO, _ARG1_LO, _ARG2_LO = 0, 4, 16, 24, 32


@dataclass(frozen=True)
class Abi:
    audit_arch: int
    socket: int
    socketpair: int
    io_uring: tuple[int, int, int]  # setup, enter, register


ABIS: dict[str, Abi] = {
    "x86_64": Abi(0xC000003E, 41, 53, (425, 426, 427)),
    "aarch64": Abi(0xC00000B7, 198, 199, (425, 426, 427)),
}
ABIS["amd64"] = ABIS["x86_64"]
ABIS["arm64"] = ABIS["aarch64"]


class SeccompUnsupported(Exception):
    """No syscall table for this machine: the arm must not claim what it cannot filter."""


# One instruction: (code, k, jump-if-true label, jump-if-false label); a label names
# the instruction that follows it in the list (`_label`). Offsets are resolved by `_link`.
_Insn = tuple[int, int, str | None, str | None]


def _op(code: int, k: int, jt: str | None = None, jf: str | None = None) -> _Insn:
    return (code, k, jt, jf)


def _link(items: list[_Insn | str]) -> bytes:
    where: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in items:
        if isinstance(item, str):
            where[item] = len(insns)
        else:
            insns.append(item)
    out = []
    for i, (code, k, jt, jf) in enumerate(insns):
        t = 0 if jt is None else where[jt] - i - 1
        f = 0 if jf is None else where[jf] - i - 1
        if not (0 <= t < 256 and 0 <= f < 256):
            raise ValueError(f"jump out of range at {i}")
        out.append(struct.pack("<HBBI", code, t, f, k))
    return b"".join(out)


def build(abi: Abi) -> bytes:
    """The program as `struct sock_filter[]` bytes (what bwrap reads from --seccomp FD)."""
    setup, enter, register = abi.io_uring
    return _link(
        [
            _op(_LD_W_ABS, _ARCH),
            _op(_JEQ_K, abi.audit_arch, None, "enosys"),  # a foreign ABI: refused whole
            _op(_LD_W_ABS, _NR),
            _op(_JGE_K, X32_SYSCALL_BIT, "enosys"),  # x32 numbers
            _op(_JEQ_K, abi.socket, "socket"),
            _op(_JEQ_K, abi.socketpair, "socketpair"),
            _op(_JEQ_K, setup, "enosys"),
            _op(_JEQ_K, enter, "enosys"),
            _op(_JEQ_K, register, "enosys"),
            _op(_RET_K, RET_ALLOW),
            "socket",
            _op(_LD_W_ABS, _ARG0_LO),
            *(_op(_JEQ_K, family, "inet") for family in policy.INET_FAMILIES),
            _op(_JEQ_K, policy.AF_NETLINK, None, "eperm"),
            _op(_LD_W_ABS, _ARG2_LO),
            _op(_JEQ_K, policy.NETLINK_ROUTE, "allow", "eperm"),
            "inet",  # by type: socket(AF_INET, SOCK_PACKET) is an AF_PACKET socket
            _op(_LD_W_ABS, _ARG1_LO),
            _op(_AND_K, SOCK_TYPE_MASK),
            *(_op(_JEQ_K, t, "allow") for t in policy.INET_TYPES),
            _op(_RET_K, RET_ERRNO | errno.EPERM),
            "socketpair",
            _op(_LD_W_ABS, _ARG0_LO),
            _op(_JEQ_K, AF_UNIX, None, "allow"),
            _op(_LD_W_ABS, _ARG1_LO),
            _op(_AND_K, SOCK_TYPE_MASK),
            _op(_JEQ_K, SOCK_STREAM, "allow"),
            _op(_JEQ_K, SOCK_SEQPACKET, "allow", "eperm"),
            # Returns last: classic BPF jumps only forward.
            "allow",
            _op(_RET_K, RET_ALLOW),
            "eperm",
            _op(_RET_K, RET_ERRNO | errno.EPERM),
            "enosys",
            _op(_RET_K, RET_ERRNO | errno.ENOSYS),
        ]
    )


def native_abi(machine: str | None = None) -> Abi:
    name = (machine or platform.machine()).lower()
    abi = ABIS.get(name)
    if abi is None:
        raise SeccompUnsupported(
            f"no syscall table for {name!r} (known: {', '.join(sorted(set(ABIS)))})"
        )
    return abi


@cache
def program() -> bytes:
    """This machine's program, built once per process."""
    return build(native_abi())


def program_fd() -> int:
    """A fresh fd holding the program at offset 0, for one bwrap (it reads to EOF). The
    caller closes it after the child started."""
    fd = os.memfd_create("sprawl-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
