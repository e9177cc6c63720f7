"""A static x86_64 program of one system call, built here as bytes: the socket-family and
io_uring probes must run where no Python and no compiler is (the busybox image of the
container rows), and must make the exact call -- family, type, protocol as numbers --
that a libc wrapper or busybox applet would not make for them.

The program makes one syscall with up to four arguments, each a number or a pointer to
zeroed memory on its stack (io_uring_setup's params, socketpair's fd pair), and exits
with 0 when the call returned a descriptor, else with the errno it returned (every errno
a socket or io_uring call returns is below 126, so the shell can tell the two apart from a
program that did not run: 126/127, or 128+signal -- SIGSYS when a seccomp filter kills the
call, SIGTRAP when even exit was refused).
"""

from __future__ import annotations

import platform
import struct

# x86_64: argument registers of the syscall ABI, as (mov r32, imm32) and (lea r64, [rsp+d32]).
_MOV_IMM = (b"\xbf", b"\xbe", b"\xba", b"\x41\xba")  # edi, esi, edx, r10d
_LEA_RSP = (b"\x48\x8d\xbc\x24", b"\x48\x8d\xb4\x24", b"\x48\x8d\x94\x24", b"\x4c\x8d\x94\x24")
# (movabs r64, imm64) for values with upper bits: the kernel reads `int family`, a filter
# may compare all 64 bits -- the probe must put them in the register, not drop them.
_MOVABS = (b"\x48\xbf", b"\x48\xbe", b"\x48\xba", b"\x49\xba")  # rdi, rsi, rdx, r10
PTR = -1  # an argument that is a pointer to 256 zeroed bytes
BASE = 0x400000
_HEADERS = 64 + 56


def supported(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64")


def _call(nr: int, args: tuple[int, ...]) -> bytes:
    if len(args) > 4:
        raise ValueError("at most four arguments")
    code = bytearray()
    for i, value in enumerate(args):
        if value == PTR:
            code += _LEA_RSP[i] + struct.pack("<I", 256 * i)
        elif value > 0xFFFFFFFF:  # movabs: a 32-bit mov would zero the upper half
            code += _MOVABS[i] + struct.pack("<Q", value)
        else:
            code += _MOV_IMM[i] + struct.pack("<I", value & 0xFFFFFFFF)
    code += b"\xb8" + struct.pack("<I", nr & 0xFFFFFFFF)  # mov eax, nr
    return bytes(code + b"\x0f\x05")  # syscall


def program(nr: int, *args: int, before: tuple[tuple[int, tuple[int, ...]], ...] = ()) -> bytes:
    """An ELF executable making syscall `nr(*args)` and exiting as the docstring says.
    `before`: calls made first, each of which must succeed (a failed one exits with its
    errno) -- e.g. unshare(CLONE_NEWUSER | CLONE_NEWNET) to hold capabilities in a network
    namespace of the command's own before the socket call."""
    code = bytearray()
    code += b"\x48\x81\xec" + struct.pack("<I", 1024)  # sub rsp, 1024
    code += b"\x48\x89\xe7\x31\xc0\xb9" + struct.pack("<I", 1024) + b"\xf3\xaa"
    # ^ mov rdi, rsp; xor eax, eax; mov ecx, 1024; rep stosb: the pointed-to memory is zero
    for call_nr, call_args in before:
        code += _call(call_nr, call_args)
        # test rax, rax; jns +11; neg eax; mov edi, eax; mov eax, 60 (exit); syscall
        code += b"\x48\x85\xc0\x79\x0b\xf7\xd8\x89\xc7\xb8\x3c\x00\x00\x00\x0f\x05"
    code += _call(nr, args)
    code += b"\x48\x85\xc0\x78\x02\x31\xc0\xf7\xd8"  # test rax,rax; js +2; xor eax,eax; neg eax
    code += b"\x89\xc7\xb8\x3c\x00\x00\x00\x0f\x05"  # mov edi, eax; mov eax, 60 (exit); syscall
    code += b"\xcc"  # int3: exit itself was refused: SIGTRAP, never a fall into garbage
    size = _HEADERS + len(code)
    ehdr = struct.pack(
        "<16sHHIQQQIHHHHHH",
        b"\x7fELF\x02\x01\x01" + bytes(9),
        2,  # ET_EXEC
        0x3E,  # EM_X86_64
        1,
        BASE + _HEADERS,  # entry: the code right after the headers
        64,  # program headers right after this one
        0,
        0,
        64,
        56,
        1,
        0,
        0,
        0,
    )
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x1000)  # PT_LOAD, R+X
    return ehdr + phdr + bytes(code)


# i386 (`int 0x80`, run by a 64-bit kernel's IA32 emulation): a filter written by syscall
# name must refuse the 32-bit numbers too, and socketcall(2), whose arguments sit behind a
# pointer a filter cannot read, must be refused whole.
_MOV_IMM32 = (b"\xbb", b"\xb9", b"\xba", b"\xbe")  # ebx, ecx, edx, esi
_LEA_ESP = (b"\x8d\x9c\x24", b"\x8d\x8c\x24", b"\x8d\x94\x24", b"\x8d\xb4\x24")
I386_SOCKET, I386_SOCKETCALL, I386_GETPID = 359, 102, 20
SYS_SOCKET = 1  # socketcall's number for socket()


def program32(nr: int, *args: int, packed: tuple[int, ...] = ()) -> bytes:
    """An i386 ELF making `nr(*args)` by `int 0x80`, exiting as `program` does. `packed`:
    words stored at the zeroed buffer (what a PTR argument points to), for socketcall."""
    code = bytearray()
    code += b"\x81\xec" + struct.pack("<I", 1024)  # sub esp, 1024
    code += b"\x89\xe7\x31\xc0\xb9" + struct.pack("<I", 1024) + b"\xf3\xaa"  # zero it
    for i, word in enumerate(packed):  # mov dword [esp + 4i], imm32
        code += b"\xc7\x84\x24" + struct.pack("<iI", 4 * i, word & 0xFFFFFFFF)
    for i, value in enumerate(args):
        if value == PTR:
            code += _LEA_ESP[i] + struct.pack("<I", 0)
        else:
            code += _MOV_IMM32[i] + struct.pack("<I", value & 0xFFFFFFFF)
    code += b"\xb8" + struct.pack("<I", nr) + b"\xcd\x80"  # mov eax, nr; int 0x80
    code += b"\x85\xc0\x78\x02\x31\xc0\xf7\xd8"  # test; js +2; xor eax, eax; neg eax
    code += b"\x89\xc3\xb8\x01\x00\x00\x00\xcd\x80"  # mov ebx, eax; mov eax, 1 (exit)
    code += b"\xcc"  # int3: exit itself was refused (a filter refusing the whole ABI): SIGTRAP
    headers = 52 + 32
    size = headers + len(code)
    ehdr = struct.pack(
        "<16sHHIIIIIHHHHHH",
        b"\x7fELF\x01\x01\x01" + bytes(9),
        2,
        3,  # EM_386
        1,
        BASE + headers,
        52,
        0,
        0,
        52,
        32,
        1,
        0,
        0,
        0,
    )
    phdr = struct.pack("<IIIIIIII", 1, 0, BASE, BASE, size, size, 5, 0x1000)
    return ehdr + phdr + bytes(code)
