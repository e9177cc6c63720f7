"""The writer note (design §5.1, way a): the state directory notes, with the boot id, that a
command of an arm that can write the copies in place ran since this boot.

Why: the copies live in the caller's state directory, so a command that runs as the caller
with no filesystem axis -- copied_tree, host, landlock without it -- can write any slot's copy
in place without its lock, and so can any process it left behind (a double-forked daemon
outlives its process group and writes later: a mark at each such command's start and end would
not bound it). Nothing cheaper than the per-file lstat sees such a write (§5.1), so a memory of
a copy's side is not trusted from the first such command until the next boot, when every
process of it is gone. The note is written before the command starts, so a memory gated after
it cannot predate it unseen.

An arm that keeps the filesystem axis but puts no mount namespace between the command and the
state directory reaches the copies too: landlock (native_fallbacks/landlock.py) runs every
command of a root caller as the one sandbox uid, which owns every landlock and bwrap copy, and
Landlock governs no chmod or utime -- a landlock command of one slot set another slot's copy
file to mode 0000 and its mtime to 2000 by its path, and the next command there, its memory
trusted, saw both (tests/integration/test_copy_memory_landlock.py). Only the arms whose
command sees nothing of the state directory (a container, bwrap's mount namespace, the python
arm's preopened copy) are left unnoted, and only they may leave a memory.

What this covers is the commands sprawl-orch runs; the person's and the agent's own processes
on the host are not sprawl-orch's commands and are not noted (README, design §5.1).
Where there is no boot id (not Linux) a note never expires: it stays until it is deleted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.assurances import Assurances, Kept
from sprawl_orch.core.errors import ErrorCode, os_errors
from sprawl_orch.core.private import private_file

NOTE = "copy-writers"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_NO_BOOT = "no boot id"
# Arms whose command cannot name another slot's copy: its view of the host is a mount namespace
# (a container, bwrap) or the preopened copy alone (the python arm's WebAssembly). Every other
# arm runs where the state directory's paths resolve (module docstring); a new arm is noted
# until it is added here.
HIDES_STATE = frozenset({ArmName.CONTAINER, ArmName.LINUX_NAMESPACES, ArmName.PYTHON})


def boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip() or _NO_BOOT
    except OSError:  # no /proc (macOS, Windows): a note then lasts until deleted
        return _NO_BOOT


def reaches_copies(arm: ArmName, assurances: Assurances) -> bool:
    """Whether a command of ``arm`` holding ``assurances`` can write a copy in place: it keeps
    no filesystem axis (it runs as the caller, seeing the caller's files), or it keeps it with
    no namespace hiding the state directory (landlock: chmod and utime of another slot's copy
    by its path, module docstring)."""
    return assurances.filesystem is not Kept.YES or arm not in HIDES_STATE


def note(state: Path) -> None:
    """Note that such a command is about to run (module docstring); a no-op when noted this
    boot already. Raises OSError when the note cannot be written: the caller must not start
    the command, or memories would go on being trusted."""
    now = boot_id()
    path = state / NOTE
    with contextlib.suppress(OSError):  # unreadable or absent: written below
        if path.read_text() == now:
            return
    # One temporary name per writer, not per process: serve's workers note from threads of one
    # process, and with a pid-named file one's os.replace took the other's away (ENOENT: a
    # host command refused E_STORAGE_FATAL in test_serve_load's 200 parallel commands).
    tmp = path.with_name(NOTE + f".{os.getpid()}.{secrets.token_hex(6)}.tmp")
    fd = private_file(tmp)  # 0600, as all the state directory keeps (a default ACL masked)
    try:
        os.write(fd, now.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def note_before(state: Path, arm: ArmName, assurances: Assurances) -> None:
    """Before a command of ``arm`` holding ``assurances`` starts: noted when it can write the
    copies in place (E_STORAGE_FATAL, the command not started, when the note can't be
    written)."""
    if not reaches_copies(arm, assurances):
        return
    with os_errors(
        ErrorCode.STORAGE_FATAL,
        state,
        "cannot note in the state directory that this command can write the copies in place "
        "(design §5.1)",
        "make the state directory writable, or set [state] dir",
    ):
        note(state)


def ran(state: Path) -> bool:
    """Whether a command that can write copies in place ran since this boot (a note stands,
    unreadable counts as one)."""
    try:
        noted = (state / NOTE).read_text()
    except FileNotFoundError:  # never noted: no such command ran with this state directory
        return False
    except OSError:  # there, but not readable: as if noted, never trusting more than known
        return True
    return noted == boot_id() or noted == _NO_BOOT or not noted
