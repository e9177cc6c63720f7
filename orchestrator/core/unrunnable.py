"""A program that cannot run is `E_TOOL_UNAVAILABLE` on every arm and engine (design §7).

Host arms check before starting (yielding.find_program: missing, a directory, not
executable, a `#!` interpreter that is absent). A container's program lives in the image,
so the runtime's own words decide, and they come in three places:

- docker refuses `start`: `exec: "./x": permission denied` (runc 1.1, create phase);
- podman's `start --attach` exits 126/127 and the container never started (StartedAt is
  the zero time) with the same runc words in State.Error / the attach's stderr;
- runc 1.1 execs the program only after the container started, so a failed execve of a
  found file (a broken `#!`, a foreign ELF, a missing ELF loader) ends the container with
  exit 1 and exactly one line on its stderr: `exec ./x: exec format error`.

A host virtualenv's interpreter is a link out of the tree (`.venv/bin/python ->
/usr/bin/python3.11`); in an image that lacks it (or its libpython) the command fails with
the loader's words only, so `host_venv` says what it is.
"""

from __future__ import annotations

import os
import re
import struct
import sys
from pathlib import Path
from typing import BinaryIO

from sprawl_orch.core.errors import ErrorCode, SprawlError

RECOVERY = (
    "check the program name, that it is an executable file (not a directory, with its "
    "execute bit) and that its #! interpreter exists where it runs; or use the shell arm "
    "(--shell)"
)
# runc's (1.1) and crun's (1.8) words for an execve that failed, as docker and podman pass them.
# runc formats every failed lookup or execve of the program as `exec: "<prog>": <errno>`
# (create phase) or `exec <prog>: <errno>` (after start): any errno counts (ELOOP, ETXTBSY...).
_RUNTIME = re.compile(
    r'exec: "(?P<program>[^"]*)": (?P<why>executable file not found in \$PATH|'
    r"stat [^:]*: [a-z ]+|[a-z][a-z ]+[a-z])",
    re.IGNORECASE,
)
_AFTER_START = re.compile(r"\Aexec (?P<program>\S+): (?P<why>[a-z][a-z ]+[a-z])\n?\Z")
_LOADER = re.compile(
    r"error while loading shared libraries: (?P<lib>\S+): cannot open shared "
    r"object file"
)
_PLAIN = {
    "executable file not found in $path": "not found on the image's PATH",
    "no such file or directory": "does not exist in the container (or its #! interpreter or "
    "ELF loader does not)",
    "permission denied": "is not executable there (a directory, or no execute bit)",
    "exec format error": "is not a program the kernel can run (no #! line, or a foreign binary)",
    "is a directory": "is a directory",
    "not a directory": "has a path through something that is not a directory",
}


def unavailable(program: str, why: str, recovery: str = RECOVERY) -> SprawlError:
    return SprawlError(ErrorCode.TOOL_UNAVAILABLE, program, why, recovery)


def _plain(why: str) -> str:
    low = why.lower()
    if low.startswith("stat "):
        low = low.rsplit(": ", 1)[-1]
    return _PLAIN.get(low, f"cannot be executed ({low})")


def runtime_refusal(words: str, program: str, venv: str | None = None) -> SprawlError | None:
    """E_TOOL_UNAVAILABLE when the engine's words say the program could not be executed."""
    found = _RUNTIME.search(words)
    if found is None:
        return None
    return _refusal(found.group("program") or program, _plain(found.group("why")), words, venv)


def after_start_refusal(
    program: str, exit_code: int | None, stdout_size: int, stderr: str, venv: str | None = None
) -> SprawlError | None:
    """runc's after-start execve failure: exit 1, no stdout, its one line on stderr."""
    if exit_code != 1 or stdout_size:
        return None
    found = _AFTER_START.match(stderr)
    if found is None or found.group("program") != program:
        return None
    return _refusal(program, _plain(found.group("why")), stderr.strip(), venv)


def loader_refusal(
    program: str, exit_code: int | None, stderr: str, venv: str | None
) -> SprawlError | None:
    """A host virtualenv's interpreter that starts but lacks its libraries in the image."""
    found = _LOADER.search(stderr)
    if venv is None or exit_code != 127 or found is None:
        return None
    return _refusal(program, f"cannot load {found.group('lib')}", stderr.strip(), venv)


def _refusal(program: str, why: str, words: str, venv: str | None) -> SprawlError:
    if venv is not None:
        return unavailable(
            program,
            f"{venv}; in the container it fails: {words}",
            "make the virtualenv where it runs: use an image that has the interpreter "
            "(sprawl-orch image build debian, or --dockerfile) and create the venv inside "
            "the command (python3 -m venv); or run it on a native arm, or with --where host",
        )
    return unavailable(program, f"{program!r} {why}: {words}")


def host_venv(tree: Path, program: str) -> str | None:
    """When `program` (a path in `tree`, or a script whose #! names one) is a virtualenv's
    interpreter whose real file lives outside the tree: a sentence saying so."""
    if "/" not in program:
        return None
    path = Path(program) if os.path.isabs(program) else tree / program
    candidates = [path]
    interpreter = shebang(path)
    if interpreter is not None:
        candidates.append(Path(interpreter))
    root = tree.resolve()
    for candidate in candidates:
        venv = next((p for p in candidate.parents if (p / "pyvenv.cfg").is_file()), None)
        if venv is None or not candidate.is_symlink():
            continue
        real = Path(os.path.realpath(candidate))
        if real.is_relative_to(root):
            continue
        name = candidate.relative_to(tree) if candidate.is_relative_to(tree) else candidate
        return (
            f"{name} is the interpreter of the host virtualenv {venv.name}/, a link to "
            f"{real} outside the working directory (the copy holds that file, not the "
            "interpreter's loader and libraries), so the image must have them for it to "
            "run"
        )
    return None


def shebang(path: Path) -> str | None:
    """The interpreter a `#!` line names, or None (not a script, unreadable)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        # unreadable here: the exec itself gives the real reason
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].strip()
    if not line:
        return ""
    return os.fsdecode(line.split()[0])


def elf_problem(path: Path) -> str | None:
    """Why the kernel would refuse this ELF file here (ENOEXEC: truncated, another class,
    byte order or machine; ENOENT: its PT_INTERP loader is absent), or None. Not an ELF
    file: None (scripts are checked by their #! line)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
            if not head.startswith(b"\x7fELF"):
                return None
            ours = _own_elf_header()
            if len(head) < 20 or ours is None:
                return "is a truncated ELF file" if len(head) < 20 else None
            if head[4:6] != ours[4:6] or head[18:20] != ours[18:20]:
                return "is an ELF binary for another machine (class, byte order or e_machine)"
            return _missing_loader(handle, head)
    except OSError:
        # unreadable here: no finer diagnosis; the exec gives the reason
        return None


def _own_elf_header() -> bytes | None:
    try:
        with open(sys.executable, "rb") as handle:
            head = handle.read(64)
    except OSError:
        # our own interpreter unreadable: skip the ELF comparison, never guess
        return None
    return head if head.startswith(b"\x7fELF") and len(head) >= 20 else None


def _missing_loader(handle: BinaryIO, head: bytes) -> str | None:
    """PT_INTERP names the dynamic loader; execve fails with ENOENT when it is absent."""
    if head[4] != 2 or head[5] != 1 or len(head) < 64:  # ELF64 little-endian only
        return None
    (phoff,) = struct.unpack_from("<Q", head, 32)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    for i in range(min(phnum, 64)):
        handle.seek(phoff + i * phentsize)
        entry = handle.read(56)
        if len(entry) < 56:
            return "is a truncated ELF file"
        (p_type,) = struct.unpack_from("<I", entry, 0)
        if p_type != 3:  # PT_INTERP
            continue
        (offset,) = struct.unpack_from("<Q", entry, 8)
        (size,) = struct.unpack_from("<Q", entry, 32)
        handle.seek(offset)
        loader = handle.read(min(size, 4096)).rstrip(b"\0").decode(errors="replace")
        if loader and not os.path.exists(loader):
            return f"needs the ELF loader {loader}, which does not exist here"
    return None
