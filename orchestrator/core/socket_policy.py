"""The one socket policy every arm that claims the network axis enforces with seccomp
(issue 30, break 5): what a command may open besides files, as numbers.

An arm that claims network runs the command in an empty network namespace. The empty
namespace hides every host *address*, but not every *kind* of socket: `socket(AF_VSOCK)`
succeeded inside docker, podman, the remapped docker and bwrap, and vsock is not
namespaced -- on a machine that is itself a VM it reaches the hypervisor's services.
io_uring (open in docker 20.10's default profile) makes sockets without a `socket()`
call seccomp could see (IORING_OP_SOCKET, Linux 5.19). So the policy is an allowlist:

- AF_INET, AF_INET6: the namespace's own loopback (test servers, local IPC over TCP),
  with the types INET_TYPES only -- never SOCK_PACKET, which the kernel makes AF_PACKET;
- AF_NETLINK with protocol NETLINK_ROUTE only: glibc's getaddrinfo (AI_ADDRCONFIG) and
  `ip` read interfaces and routes over it; every other netlink protocol (uevent, audit,
  sock_diag, xfrm, netfilter, generic) is refused;
- AF_UNIX only where the arm allows it (containers: a private namespace of its own; bwrap
  refuses it, see native_fallbacks/seccomp_filter.py);
- socketpair: AF_UNIX only (AF_TIPC has socketpair too);
- io_uring_setup/enter/register: refused with ENOSYS, so libraries fall back to epoll;
- socketcall (the 32-bit multiplexer): refused -- its arguments sit behind a pointer
  seccomp cannot read.
"""

from __future__ import annotations

import errno

AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16
NETLINK_ROUTE = 0
SOCK_TYPE_MASK = 0xF
# The types inet and inet6 are opened with: stream, dgram, raw, seqpacket (SCTP). Not
# SOCK_PACKET (10): socket(AF_INET, SOCK_PACKET, ...) is an AF_PACKET socket in the kernel.
INET_TYPES: tuple[int, ...] = (1, 2, 3, 5)
# Families any command may open (AF_NETLINK only with NETLINK_ROUTE).
INET_FAMILIES: tuple[int, ...] = (AF_INET, AF_INET6)
IO_URING: tuple[str, ...] = ("io_uring_setup", "io_uring_enter", "io_uring_register")
IO_URING_ERRNO = errno.ENOSYS
# Every syscall whose rules the policy writes itself: an engine's own rules for them are
# dropped, whatever they allowed.
OWNED: frozenset[str] = frozenset({"socket", "socketpair", "socketcall", *IO_URING})
