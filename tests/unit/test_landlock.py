"""The landlock mechanism's pure parts: the choice between bwrap and Landlock, the axes per
ABI, the config's spellings, the ruleset, the seccomp program's decisions (run through a
small classic-BPF interpreter, so each refusal is checked by its numbers). The kernel's
answer to all of it is tests/integration/test_landlock_real.py's."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.arms import ArmName, landlock_assurances
from sprawl_orch.core.assurances import Guarantee
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.native_fallbacks import landlock_helper as kernel
from sprawl_orch.native_fallbacks.bwrap_view import View
from sprawl_orch.native_fallbacks.landlock import READ, WRITE, rules
from sprawl_orch.native_fallbacks.seccomp_filter import ABIS
from sprawl_orch.native_fallbacks.seccomp_landlock import build
from sprawl_orch.selection.choice import choose
from sprawl_orch.selection.offerings import Offerings

SCRATCH = Path("/nonexistent-scratch")


def linux(**kw: object) -> Offerings:
    base: dict[str, object] = {
        "platform": "linux",
        "scratch": SCRATCH,
        "bwrap": "/usr/bin/bwrap",
        "user_namespace": True,
        "landlock_abi": 7,
    }
    base.update(kw)
    return Offerings(**base)  # type: ignore[arg-type]


def kinds(choice_missing: tuple[object, ...]) -> list[str]:
    return [m.kind for m in choice_missing]  # type: ignore[attr-defined]


# -- the choice ---------------------------------------------------------------------------
def test_native_takes_bwrap_where_a_user_namespace_can_be_made() -> None:
    choice = choose("native", linux())
    assert (choice.arm, choice.missing) == (ArmName.LINUX_NAMESPACES, ())


def test_native_steps_to_landlock_where_bwrap_cannot_and_says_why() -> None:
    choice = choose("native", linux(user_namespace=False, user_namespace_why="ENOSPC"))
    assert choice.arm is ArmName.LANDLOCK
    assert kinds(choice.missing) == ["user_namespace"]
    assert "ENOSPC" in choice.reason() and "landlock" in choice.reason()


def test_auto_steps_past_engines_and_bwrap_to_landlock() -> None:
    choice = choose("auto", linux(bwrap=None, user_namespace=None))
    assert choice.arm is ArmName.LANDLOCK
    assert kinds(choice.missing) == ["container_runtime", "namespace_wrapper"]


def test_auto_takes_the_copied_tree_when_the_abi_is_too_old_naming_both() -> None:
    choice = choose("auto", linux(user_namespace=False, landlock_abi=2))
    assert choice.arm is ArmName.COPIED_TREE
    assert kinds(choice.missing) == ["container_runtime", "user_namespace", "landlock"]
    assert "ABI 2" in choice.missing[2].phrase and "ABI 3" in choice.missing[2].phrase


def test_a_named_mechanism_is_that_one_or_nothing() -> None:
    forced = choose("native", linux(), mechanism="landlock")
    assert (forced.arm, forced.missing) == (ArmName.LANDLOCK, ())
    no_landlock = choose("native", linux(landlock_abi=0), mechanism="landlock")
    assert no_landlock.arm is ArmName.UNAVAILABLE
    assert "no Landlock" in no_landlock.reason()
    bwrap_only = choose("native", linux(user_namespace=False), mechanism="bwrap")
    assert bwrap_only.arm is ArmName.UNAVAILABLE
    assert kinds(bwrap_only.missing) == ["user_namespace"]


def test_a_misspelled_mechanism_is_refused_listing_the_spellings() -> None:
    with pytest.raises(SprawlError) as err:
        parse_config({"sandbox": {"native": {"mechanism": "landlok"}}})
    assert err.value.code.value == "E_CONFIG_INVALID"
    assert err.value.subject == "[sandbox.native] mechanism"
    for spelling in ("auto", "bwrap", "landlock"):
        assert spelling in err.value.detail


# -- the axes follow the ABI --------------------------------------------------------------
@pytest.mark.parametrize(
    ("abi", "root", "kept"),
    [
        (0, True, set()),
        (2, True, set()),
        (3, True, {"filesystem", "process_tree"}),
        (3, False, set()),  # no signal scoping: the command kills its guardian and caller
        (4, True, {"filesystem", "process_tree", "network"}),
        (5, False, {"network"}),
        (6, True, {"filesystem", "process_tree", "network"}),
        (7, False, {"process_tree", "network"}),
    ],
)
def test_axes_follow_the_abi_and_the_caller(abi: int, root: bool, kept: set[str]) -> None:
    got = landlock_assurances(abi, own_principal=root)
    assert {a.value for a in Guarantee if got.kept(a)} == kept


# -- the ruleset --------------------------------------------------------------------------
def test_the_rules_read_the_view_and_write_only_the_copy_and_private_places() -> None:
    view = View(("/usr", "/etc", "/opt/tool"), (("usr/bin", "/bin"),))
    got = dict(rules(view, [Path("/s/copy"), Path("/s/out/tmp")], [Path("/s/out/stdout")]))
    assert {p for p, r in got.items() if r & kernel.FS_WRITE_FILE} == {
        "/s/copy",
        "/s/out/tmp",
        "/s/out/stdout",
        "/dev/null",
        "/dev/zero",
        "/dev/full",
    }
    assert all(got[p] == READ for p in view.binds)
    assert not WRITE & (kernel.FS_MAKE_CHAR | kernel.FS_MAKE_BLOCK | kernel.FS_MAKE_SOCK)
    assert got["/s/out/stdout"] & ~kernel.FILE_RIGHTS == 0  # a file's rule: file rights only


def test_every_right_the_abi_knows_is_handled() -> None:
    assert kernel.handled_fs(1) == (1 << 13) - 1
    assert kernel.handled_fs(3) == (1 << 15) - 1
    assert kernel.handled_fs(7) == (1 << 16) - 1


# -- the seccomp program, run -------------------------------------------------------------
def run_bpf(program: bytes, nr: int, args: tuple[int, ...] = (), arch: int = 0xC000003E) -> int:
    """A classic-BPF interpreter for the instructions the program uses (ld abs, jeq, jge,
    and, ret) over a struct seccomp_data; returns the action."""
    full = (list(args) + [0] * 6)[:6]
    data = struct.pack("<iIQ6Q", nr, arch, 0, *full)
    insns = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:
            acc &= k
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += jt if hit else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"instruction {code:#x} not interpreted")


ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x50000 | errno.EPERM, 0x50000 | errno.ENOSYS


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_refuses_what_no_namespace_stops(machine: str) -> None:
    abi = ABIS[machine]
    program = build(abi)
    n = {  # per-arch numbers
        "x86_64": {"setsid": 112, "setpgid": 109, "unshare": 272, "clone": 56, "clone3": 435,
                   "listen": 50, "ioctl": 16, "sendto": 44, "sendmsg": 46, "read": 0,
                   "shmat": 30, "msgsnd": 69, "semop": 65, "shmget": 29,
                   "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
                   "prlimit64": 302, "setaffinity": 203, "setpriority": 141, "ioprio_set": 251},
        "aarch64": {"setsid": 157, "setpgid": 154, "unshare": 97, "clone": 220, "clone3": 435,
                    "listen": 201, "ioctl": 29, "sendto": 206, "sendmsg": 211, "read": 63,
                    "shmat": 196, "msgsnd": 189, "semop": 193, "shmget": 194,
                    "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182,
                    "prlimit64": 261, "setaffinity": 122, "setpriority": 140, "ioprio_set": 30},
    }[machine]  # fmt: skip

    def run(nr: int, *args: int) -> int:
        return run_bpf(program, nr, args, abi.audit_arch)

    assert run(n["read"]) == ALLOW
    assert run(abi.socket, 2, 1, 0) == ALLOW  # TCP
    assert run(abi.socket, 10, 1 | 0o2000000, 6) == ALLOW  # TCP6, SOCK_CLOEXEC, IPPROTO_TCP
    assert run(abi.socket, 2, 2, 0) == EPERM  # UDP: Landlock has no rule for it
    assert run(abi.socket, 2, 1, 132) == EPERM  # SCTP stream
    assert run(abi.socket, 2, 1, 262) == EPERM  # MPTCP
    assert run(abi.socket, 2, 5, 132) == EPERM  # SCTP seqpacket
    assert run(abi.socket, 2, 3, 1) == EPERM  # raw
    assert run(abi.socket, 1, 1, 0) == EPERM  # AF_UNIX
    assert run(abi.socket, 40, 1, 0) == EPERM  # AF_VSOCK
    assert run(abi.socket, 16, 3, 0) == ALLOW  # route netlink
    assert run(abi.socketpair, 1, 1, 0) == ALLOW
    assert run(abi.socketpair, 1, 2, 0) == EPERM
    assert run(n["setsid"]) == EPERM
    assert run(n["setpgid"], 0, 0) == EPERM
    assert run(n["unshare"], 0x10000000) == EPERM
    assert run(n["clone"], 0x11) == ALLOW  # a fork: SIGCHLD, no namespace flag
    assert run(n["clone"], 0x10000011) == EPERM  # CLONE_NEWUSER
    assert run(n["clone"], 0x40000011) == EPERM  # CLONE_NEWNET
    assert run(n["clone3"]) == ENOSYS
    assert run(n["listen"], 3, 1) == EPERM
    assert run(n["ioctl"], 0, 0x5412) == EPERM  # TIOCSTI
    assert run(n["ioctl"], 0, 0x5401) == ALLOW  # TCGETS
    assert run(n["sendto"], 3, 0, 1, 0x20000000) == EPERM  # MSG_FASTOPEN
    assert run(n["sendto"], 3, 0, 1, 0x40) == ALLOW  # MSG_DONTWAIT
    assert run(n["sendmsg"], 3, 0, 0x20000000) == EPERM
    assert run(abi.io_uring[0]) == ENOSYS
    assert run(abi.keyring[2]) == EPERM
    for ipc in ("shmat", "msgsnd", "semop", "shmget", "mq_open", "mq_unlink", "mq_timedsend"):
        assert run(n[ipc], 0, 0, 0) == EPERM, ipc
    # another process of the same uid by its pid (no ptrace check): only the caller itself
    for by_pid in ("prlimit64", "setaffinity"):
        assert (run(n[by_pid], 0, 7), run(n[by_pid], 4242, 7)) == (ALLOW, EPERM), by_pid
    assert run(n["setpriority"], 0, 0, 10) == ALLOW  # nice(1): PRIO_PROCESS, self
    assert run(n["setpriority"], 0, 4242, 10) == EPERM
    assert run(n["setpriority"], 2, 0, 10) == EPERM  # PRIO_USER 0: every process of the uid
    assert run(n["setpriority"], 1, 0, 10) == EPERM  # PRIO_PGRP: the helper's group too
    assert run(n["ioprio_set"], 1, 0, 7) == ALLOW  # ionice CMD
    assert run(n["ioprio_set"], 1, 4242, 7) == EPERM
    assert run(n["ioprio_set"], 3, 0, 7) == EPERM  # IOPRIO_WHO_USER
    assert run(n["read"] | 0x40000000) == ENOSYS  # x32


def test_a_foreign_abi_is_refused_whole() -> None:
    program = build(ABIS["x86_64"])
    assert run_bpf(program, 0, (), arch=0x40000003) == ENOSYS


def test_landlock_named_on_a_kernel_without_it_is_refused_with_both_abis() -> None:
    """What exec says (build_arm): E_SANDBOX_DENIED, naming the ABI found and the one needed."""
    from sprawl_orch.config import Config
    from sprawl_orch.selection.arm_factory import build_arm

    offerings = linux(landlock_abi=2)
    choice = choose("native", offerings, mechanism="landlock")
    with pytest.raises(SprawlError) as err:
        build_arm(choice, offerings, Config())
    assert err.value.code.value == "E_SANDBOX_DENIED"
    assert "ABI 2" in err.value.detail and "ABI 3" in err.value.detail
    assert "bwrap" in err.value.recovery
