"""macOS Seatbelt (`macos_seatbelt`): the copied tree under `sandbox-exec -p PROFILE` (design §6).

The profile is fixed and deny-default: reads are allowed everywhere, writes only under the
copy (and to the null, zero and terminal devices), and every network operation is denied.
Process lifetime, identity and resources are not confined (those axes say NO).

- Seatbelt matches *resolved* paths: on macOS /tmp is /private/tmp and $TMPDIR is under
  /private/var/folders, so a profile naming /var/folders/... would deny every write. The
  copy is resolved before it is put into the profile.
- The yielding prefix (nice, taskpolicy) stays outside sandbox-exec: a deny-default profile
  would otherwise refuse the scheduling calls they make.
- `sandbox-exec` is marked deprecated by Apple but still ships and works on current macOS
  runners. When it is absent or refuses the profile the command is refused; the bare
  command is never run instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sprawl_orch.core.arms import ArmName, seatbelt
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.native_fallbacks.copied_tree import CopiedTreeArm
from sprawl_orch.native_fallbacks.probe import run_probe
from sprawl_orch.runs.yielding import Yielders

TRUE = "/usr/bin/true"

# Everything but the copy's path. Written for this project; the set of allowances is
# the usual one for running developer tools under Seatbelt (Chromium's and Codex's base
# policies allow the same classes of operation).
_PROFILE_HEAD = """\
(version 1)
(deny default)
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow file-read*)
(allow sysctl-read)
(allow user-preference-read)
(allow mach-host*)
(allow ipc-posix-sem)
(allow ipc-posix-shm-read* ipc-posix-shm-write-create ipc-posix-shm-write-data)
(allow pseudo-tty)
(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))
(allow file-ioctl (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty")
  (literal "/dev/dtracehelper"))
(allow file-write-data (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty")
  (literal "/dev/dtracehelper"))
"""

_PROFILE_TAIL = """\
(deny network*)
"""


def _quoted(path: str) -> str:
    """An SBPL string literal (SBPL is a Scheme: backslash escapes `\\` and `"`)."""
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile(copy: Path | str) -> str:
    """The fixed profile with writes allowed under `copy` (already resolved). Pure."""
    where = _quoted(str(copy))
    return _PROFILE_HEAD + f"(allow file-write* (subpath {where}))\n" + _PROFILE_TAIL


def seatbelt_argv(sandbox_exec: str, copy: Path | str, argv: Sequence[str]) -> list[str]:
    # sandbox-exec reads its options with getopt(3), so "--" ends them even when a
    # program name starts with "-".
    return [sandbox_exec, "-p", profile(copy), "--", *argv]


class SeatbeltArm(CopiedTreeArm):
    name: ArmName = ArmName.MACOS_SEATBELT

    def __init__(self, sandbox_exec: str, yielders: Yielders) -> None:
        super().__init__(yielders)
        self.sandbox_exec = sandbox_exec

    def note(self) -> str | None:
        return "Reads are not restricted: the whole machine is readable."

    def prepare(self, workdir: Path) -> None:
        """Run the fixed profile once, writing nothing, before any copy is made."""
        if not os.access(self.sandbox_exec, os.X_OK):
            self._refuse(f"{self.sandbox_exec} is not an executable file")
        true = TRUE if os.path.exists(TRUE) else "/bin/true"
        argv = seatbelt_argv(self.sandbox_exec, os.path.realpath(workdir), [true])
        ok, why = run_probe(argv, "sandbox-exec")
        if not ok:
            self._refuse(f"the fixed profile was refused: {why}")

    def _refuse(self, why: str) -> None:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            subject="sandbox-exec",
            detail=f"the macos_seatbelt arm cannot confine commands here: {why}; the command "
            "is not run unconfined",
            recovery=seatbelt(why).recovery + ', or ask for where = "host"',
        )

    def wrap(self, argv: Sequence[str], copy: Path) -> list[str]:
        return seatbelt_argv(self.sandbox_exec, os.path.realpath(copy), argv)
