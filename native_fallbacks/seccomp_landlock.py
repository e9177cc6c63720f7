"""The seccomp program of the landlock mechanism: the bwrap arm's (seccomp_filter.py) plus
the refusals a missing namespace leaves to seccomp.

Under bwrap an empty network namespace, a pid namespace and `--disable-userns` stand
behind the filter; here nothing does, so the filter itself must close what they closed:

- inet sockets: SOCK_STREAM with protocol 0 or IPPROTO_TCP only. Landlock's network rules
  (ABI >= 4) cover TCP bind/connect by port and nothing else: a UDP, SCTP (a seqpacket or
  stream socket with IPPROTO_SCTP), MPTCP, ICMP or raw socket reaches the host's network
  unhindered, so every one of them is refused here.
- `sendto/sendmsg/sendmmsg` with MSG_FASTOPEN -> EPERM: TCP Fast Open connects from inside
  sendmsg (tcp_sendmsg_fastopen -> __inet_stream_connect), without the connect() whose LSM
  hook Landlock's CONNECT_TCP rule sits on.
- `listen` -> EPERM: listen() on an unbound TCP socket binds it to an ephemeral port
  (inet_autobind) without the bind() Landlock's BIND_TCP rule sits on -- a port anyone on
  the host could connect to.
- `setsid`, `setpgid` -> EPERM: without a pid namespace the command's processes are found
  by their process group (HostProcess kills it, the guardian kills it if we die); a
  process that left it would outlive the command. Python's start_new_session and node's
  `detached` fail with EPERM here (docs/landlock.md).
- `unshare`, `setns`, and `clone` with any CLONE_NEW* flag -> EPERM; `clone3` -> ENOSYS (its
  flags sit behind a pointer; glibc falls back to clone): a user namespace of its own would
  give the command every capability over new mounts and namespaces (bwrap's
  --disable-userns).
- SysV IPC (`shmget/shmat/shmctl/shmdt`, `msgget/msgsnd/msgrcv/msgctl`,
  `semget/semop/semtimedop/semctl`) -> EPERM: bwrap unshares the IPC namespace; here the
  host's is shared, so a 0666 queue or segment of any host process is a channel out (a
  segment is attached by its small integer id alone, no shmget needed), and an object the
  command makes outlives it (test_landlock_reach.py::test_no_sysv_ipc_with_the_host).
- POSIX message queues (`mq_open`, `mq_unlink`, `mq_timedsend`, `mq_timedreceive`,
  `mq_notify`, `mq_getsetattr`) -> EPERM: they live in the IPC namespace too, named by no
  path of ours. Landlock refuses the open of a queue's file, but mq_open(O_CREAT) makes the
  queue before that open: on 6.18 (ABI 7) the command got EACCES and the queue was in the
  host's namespace afterwards (test_landlock_reach.py::test_no_posix_queue_with_the_host).
- `prlimit64`, `sched_setaffinity`, `sched_setscheduler`, `sched_setparam`, `sched_setattr`
  of a pid other than 0 (the caller), `setpriority` and `ioprio_set` other than of the caller
  itself -> EPERM: these reach any process of the same uid by its pid with no ptrace check
  -- the helper, every other landlock command of a root caller (the one sandbox uid), every
  process of a non-root caller's -- and Landlock's scoping sees signals only, while a hard
  RLIMIT_CPU is a SIGKILL from the kernel (the pid namespace hid them under bwrap;
  test_landlock_reach.py::test_no_other_process_is_reached_by_its_pid).
- `ioctl(TIOCSTI)`, `ioctl(TIOCLINUX)` -> EPERM: keystrokes pushed into a terminal (the
  helper runs in a session of its own with no terminal; this is the second lock).

`ptrace`, `process_vm_*`, `/proc/<pid>/mem`, `/proc/<pid>/root` of processes outside the
command are Landlock's own: a domain cannot ptrace-access a process outside it (since 5.13).
Signals and abstract unix sockets are scoped with ABI 6 (landlock.py).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from functools import cache

from sprawl_orch.core import socket_policy as policy
from sprawl_orch.native_fallbacks.seccomp_filter import (
    _AND_K,
    _ARCH,
    _JEQ_K,
    _JGE_K,
    _LD_W_ABS,
    _NR,
    _RET_K,
    AF_UNIX,
    RET_ALLOW,
    RET_ERRNO,
    SOCK_SEQPACKET,
    SOCK_STREAM,
    SOCK_TYPE_MASK,
    X32_SYSCALL_BIT,
    Abi,
    _link,
    _op,
    native_abi,
)

# struct seccomp_data: args[i]'s low half at 16 + 8*i (little-endian).
_ARG = (16, 24, 32, 40, 48, 56)
IPPROTO_TCP = 6
MSG_FASTOPEN = 0x20000000
TIOCSTI = 0x5412
PRIO_PROCESS = 0
IOPRIO_WHO_PROCESS = 1
TIOCLINUX = 0x541C
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
CLONE_NEW_MASK |= 0x40000000


@dataclass(frozen=True)
class Extra:
    """The numbers of the syscalls only this program looks at (per architecture)."""

    setsid: int
    setpgid: int
    unshare: int
    setns: int
    clone: int
    clone3: int
    listen: int
    ioctl: int
    sendto: int
    sendmsg: int
    sendmmsg: int
    sysv_ipc: tuple[int, ...]  # shm*, msg*, sem* (every call takes an id or makes one)
    posix_mq: tuple[int, ...]  # mq_open .. mq_getsetattr
    # prlimit64, sched_setaffinity, sched_setscheduler, sched_setparam, sched_setattr
    by_pid: tuple[int, ...]  # arg0 a pid: 0 only
    setpriority: int  # (which, who): PRIO_PROCESS, 0 only
    ioprio_set: int  # (which, who): IOPRIO_WHO_PROCESS, 0 only


EXTRA: dict[int, Extra] = {
    # x86_64 (AUDIT_ARCH_X86_64)
    0xC000003E: Extra(
        112,
        109,
        272,
        308,
        56,
        435,
        50,
        16,
        44,
        46,
        307,
        (29, 30, 31, 67, 68, 69, 70, 71, 64, 65, 220, 66),
        (240, 241, 242, 243, 244, 245),
        (302, 203, 144, 142, 314),
        141,
        251,
    ),
    # aarch64 (AUDIT_ARCH_AARCH64)
    0xC00000B7: Extra(
        157,
        154,
        97,
        268,
        220,
        435,
        201,
        29,
        206,
        211,
        269,
        (194, 196, 195, 197, 186, 189, 188, 187, 190, 193, 192, 191),
        (180, 181, 182, 183, 184, 185),
        (261, 122, 119, 118, 274),
        140,
        30,
    ),
}


def build(abi: Abi) -> bytes:
    """The program as `struct sock_filter[]` bytes, for PR_SET_SECCOMP."""
    more = EXTRA[abi.audit_arch]
    setup, enter, register = abi.io_uring
    return _link(
        [
            _op(_LD_W_ABS, _ARCH),
            _op(_JEQ_K, abi.audit_arch, None, "enosys"),  # a foreign ABI: refused whole
            _op(_LD_W_ABS, _NR),
            _op(_JGE_K, X32_SYSCALL_BIT, "enosys"),
            _op(_JEQ_K, abi.socket, "socket"),
            _op(_JEQ_K, abi.socketpair, "socketpair"),
            _op(_JEQ_K, setup, "enosys"),
            _op(_JEQ_K, enter, "enosys"),
            _op(_JEQ_K, register, "enosys"),
            _op(_JEQ_K, more.clone3, "enosys"),
            *(_op(_JEQ_K, nr, "eperm") for nr in abi.keyring),
            *(
                _op(_JEQ_K, nr, "eperm")
                for nr in (more.setsid, more.setpgid, more.unshare, more.setns, more.listen)
            ),
            *(_op(_JEQ_K, nr, "eperm") for nr in more.sysv_ipc + more.posix_mq),
            *(_op(_JEQ_K, nr, "self") for nr in more.by_pid),
            _op(_JEQ_K, more.setpriority, "prio"),
            _op(_JEQ_K, more.ioprio_set, "ioprio"),
            _op(_JEQ_K, more.clone, "clone"),
            _op(_JEQ_K, more.ioctl, "ioctl"),
            _op(_JEQ_K, more.sendmsg, "flags2"),
            _op(_JEQ_K, more.sendto, "flags3"),
            _op(_JEQ_K, more.sendmmsg, "flags3"),
            _op(_RET_K, RET_ALLOW),
            "socket",
            _op(_LD_W_ABS, _ARG[0]),
            *(_op(_JEQ_K, family, "inet") for family in policy.INET_FAMILIES),
            _op(_JEQ_K, policy.AF_NETLINK, None, "eperm"),
            _op(_LD_W_ABS, _ARG[2]),
            _op(_JEQ_K, policy.NETLINK_ROUTE, "allow", "eperm"),
            "inet",  # TCP only: Landlock's rules see nothing else
            _op(_LD_W_ABS, _ARG[1]),
            _op(_AND_K, SOCK_TYPE_MASK),
            _op(_JEQ_K, SOCK_STREAM, None, "eperm"),
            _op(_LD_W_ABS, _ARG[2]),
            _op(_JEQ_K, 0, "allow"),
            _op(_JEQ_K, IPPROTO_TCP, "allow", "eperm"),
            "socketpair",
            _op(_LD_W_ABS, _ARG[0]),
            _op(_JEQ_K, AF_UNIX, None, "allow"),
            _op(_LD_W_ABS, _ARG[1]),
            _op(_AND_K, SOCK_TYPE_MASK),
            _op(_JEQ_K, SOCK_STREAM, "allow"),
            _op(_JEQ_K, SOCK_SEQPACKET, "allow", "eperm"),
            "self",
            _op(_LD_W_ABS, _ARG[0]),
            _op(_JEQ_K, 0, "allow", "eperm"),
            "prio",
            _op(_LD_W_ABS, _ARG[0]),
            _op(_JEQ_K, PRIO_PROCESS, "who", "eperm"),
            "ioprio",
            _op(_LD_W_ABS, _ARG[0]),
            _op(_JEQ_K, IOPRIO_WHO_PROCESS, "who", "eperm"),
            "who",
            _op(_LD_W_ABS, _ARG[1]),
            _op(_JEQ_K, 0, "allow", "eperm"),
            "clone",
            _op(_LD_W_ABS, _ARG[0]),
            _op(_AND_K, CLONE_NEW_MASK),
            _op(_JEQ_K, 0, "allow", "eperm"),
            "ioctl",
            _op(_LD_W_ABS, _ARG[1]),
            _op(_JEQ_K, TIOCSTI, "eperm"),
            _op(_JEQ_K, TIOCLINUX, "eperm", "allow"),
            "flags2",
            _op(_LD_W_ABS, _ARG[2]),
            _op(_AND_K, MSG_FASTOPEN),
            _op(_JEQ_K, 0, "allow", "eperm"),
            "flags3",
            _op(_LD_W_ABS, _ARG[3]),
            _op(_AND_K, MSG_FASTOPEN),
            _op(_JEQ_K, 0, "allow", "eperm"),
            "allow",
            _op(_RET_K, RET_ALLOW),
            "eperm",
            _op(_RET_K, RET_ERRNO | errno.EPERM),
            "enosys",
            _op(_RET_K, RET_ERRNO | errno.ENOSYS),
        ]
    )


@cache
def program() -> bytes:
    """This machine's program, built once per process (SeccompUnsupported elsewhere)."""
    return build(native_abi())
