"""Docker's default seccomp profile, as moby publishes it (profiles/seccomp/default.json),
in a compact form this module turns back into the OCI profile JSON.

Why a copy here: dockerd keeps its default compiled in and no API returns it, yet a
profile passed with `--security-opt seccomp=FILE` *replaces* the default -- so sprawl-orch
must hand docker the default plus its own refusals (seccomp_profile.py), and the default
has to come from somewhere. This is moby's published profile of the 23.0-24.0 line
(AF_VSOCK already refused there, io_uring still allowed); both of those are the policy's
own rules anyway (socket_policy.OWNED), whatever this base says. Podman's default is read
from the file podman itself reads (seccomp_profile.podman_base).

Rules keep moby's meaning: `includes`/`excludes` by capability and architecture are
applied by the engine when it loads the profile, as for its own default.
"""

from __future__ import annotations

from typing import Any

_ALLOWED_TEXT = """
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime
clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range connect
copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old
epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit
exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir
fchmod fchmodat fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr
flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync
ftruncate ftruncate64 futex futex_time64 futex_waitv futimesat getcpu getcwd getdents
getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32
getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid
getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage getsid getsockname
getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr inotify_add_watch
inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents
io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit
io_uring_enter io_uring_register io_uring_setup ipc kill landlock_add_rule
landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat
listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 madvise
membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2
mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open mq_timedreceive
mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget
msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat
_newselect open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc
pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64
process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read readahead
readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages
removexattr rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction
rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait
rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam
sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval
sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam
sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop
semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32
setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority
setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32
setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4
sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statx
symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create
timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime
timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime
timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat
utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev
"""
# The profile's first rule: allowed whatever the command's capabilities.
ALLOWED: list[str] = _ALLOWED_TEXT.split()

ARCH_MAP: list[tuple[str, list[str] | None]] = [
    ("SCMP_ARCH_X86_64", ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]),
    ("SCMP_ARCH_AARCH64", ["SCMP_ARCH_ARM"]),
    ("SCMP_ARCH_MIPS64", ["SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64N32"]),
    ("SCMP_ARCH_MIPS64N32", ["SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64"]),
    ("SCMP_ARCH_MIPSEL64", ["SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64N32"]),
    ("SCMP_ARCH_MIPSEL64N32", ["SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64"]),
    ("SCMP_ARCH_S390X", ["SCMP_ARCH_S390"]),
    ("SCMP_ARCH_RISCV64", None),
]

CLONE_NS_MASK = 2114060288  # CLONE_NEWNS|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWCGROUP

# (names, includes.caps) granted only with a capability the command is given.
BY_CAP: list[tuple[str, str]] = [
    ("open_by_handle_at", "CAP_DAC_READ_SEARCH"),
    (
        "bpf clone clone3 fanotify_init fsconfig fsmount fsopen fspick lookup_dcookie mount "
        "mount_setattr move_mount open_tree perf_event_open quotactl quotactl_fd "
        "setdomainname sethostname setns syslog umount umount2 unshare",
        "CAP_SYS_ADMIN",
    ),
    ("reboot", "CAP_SYS_BOOT"),
    ("chroot", "CAP_SYS_CHROOT"),
    ("delete_module init_module finit_module", "CAP_SYS_MODULE"),
    ("acct", "CAP_SYS_PACCT"),
    (
        "kcmp pidfd_getfd process_madvise process_vm_readv process_vm_writev ptrace",
        "CAP_SYS_PTRACE",
    ),
    ("iopl ioperm", "CAP_SYS_RAWIO"),
    ("settimeofday stime clock_settime clock_settime64", "CAP_SYS_TIME"),
    ("vhangup", "CAP_SYS_TTY_CONFIG"),
    ("get_mempolicy mbind set_mempolicy set_mempolicy_home_node", "CAP_SYS_NICE"),
    ("syslog", "CAP_SYSLOG"),
    ("bpf", "CAP_BPF"),
    ("perf_event_open", "CAP_PERFMON"),
]

# (names, includes.arches)
BY_ARCH: list[tuple[str, list[str]]] = [
    ("sync_file_range2 swapcontext", ["ppc64le"]),
    (
        "arm_fadvise64_64 arm_sync_file_range sync_file_range2 breakpoint cacheflush set_tls",
        ["arm", "arm64"],
    ),
    ("arch_prctl", ["amd64", "x32"]),
    ("modify_ldt", ["amd64", "x32", "x86"]),
    ("s390_pci_mmio_read s390_pci_mmio_write s390_runtime_instr", ["s390", "s390x"]),
    ("riscv_flush_icache", ["riscv64"]),
]


def _allow(names: str | list[str], **more: Any) -> dict[str, Any]:
    listed = names.split() if isinstance(names, str) else names
    return {"names": listed, "action": "SCMP_ACT_ALLOW", **more}


def _arg(index: int, value: int, op: str) -> dict[str, Any]:
    return {"index": index, "value": value, "op": op}


def profile() -> dict[str, Any]:
    """moby's default profile as the JSON object docker reads."""
    rules: list[dict[str, Any]] = [
        _allow(ALLOWED),
        _allow("process_vm_readv process_vm_writev ptrace", includes={"minKernel": "4.8"}),
        _allow("socket", args=[_arg(0, 40, "SCMP_CMP_NE")]),
    ]
    for persona in (0, 8, 131072, 131080, 4294967295):
        rules.append(_allow("personality", args=[_arg(0, persona, "SCMP_CMP_EQ")]))
    rules += [_allow(names, includes={"arches": arches}) for names, arches in BY_ARCH]
    rules += [_allow(names, includes={"caps": [cap]}) for names, cap in BY_CAP[:2]]
    rules += [
        _allow(
            "clone",
            args=[_arg(0, CLONE_NS_MASK, "SCMP_CMP_MASKED_EQ")],
            excludes={"caps": ["CAP_SYS_ADMIN"], "arches": ["s390", "s390x"]},
        ),
        _allow(
            "clone",
            args=[_arg(1, CLONE_NS_MASK, "SCMP_CMP_MASKED_EQ")],
            includes={"arches": ["s390", "s390x"]},
            excludes={"caps": ["CAP_SYS_ADMIN"]},
        ),
        {
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": 38,
            "excludes": {"caps": ["CAP_SYS_ADMIN"]},
        },
    ]
    rules += [_allow(names, includes={"caps": [cap]}) for names, cap in BY_CAP[2:]]
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "archMap": [{"architecture": a, "subArchitectures": s} for a, s in ARCH_MAP],
        "syscalls": rules,
    }
