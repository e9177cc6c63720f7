"""Host-side commands run one level below the orchestrator (design §7).

`nice -n 10 --` (with `ionice -c 2 -n 7` outside it when present; macOS: `taskpolicy
-c utility`). The program is checked the way execvp finds it *before* wrapping:
a missing program would otherwise surface as a confusing exit 127 from nice.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sprawl_orch.core.unrunnable import elf_problem, shebang, unavailable


@dataclass(frozen=True)
class Yielders:
    nice: str | None
    ionice: str | None
    taskpolicy: str | None = None


def find_program(program: str, env: Mapping[str, str], cwd: str) -> str:
    """Resolve like execvp: a name with a slash is a path (relative to cwd); else the
    first executable match on the child's PATH. A script's #! interpreter must exist too:
    execve fails with ENOENT otherwise, which nice(1) would report as a bare exit 127."""
    if "/" in program:
        path = os.path.normpath(program if os.path.isabs(program) else os.path.join(cwd, program))
        if os.path.isdir(path):
            raise unavailable(program, f"{path} is a directory, not a program")
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise unavailable(program, f"{path} {_why_not(path)}")
        found = program
        checked = path
    else:
        which = shutil.which(program, path=env.get("PATH", os.defpath))
        if which is None:
            raise unavailable(program, f"not found on PATH={env.get('PATH', os.defpath)}")
        found = checked = which
    problem = elf_problem(Path(checked))
    if problem is not None:
        raise unavailable(program, f"{os.path.normpath(checked)} {problem}")
    interpreter = shebang(Path(checked))
    if interpreter is not None:
        target = os.path.join(cwd, interpreter) if interpreter else ""
        if not interpreter or not os.path.isfile(target) or not os.access(target, os.X_OK):
            named = (
                f"names {interpreter}, which is not an executable file"
                if interpreter
                else "names no interpreter"
            )
            raise unavailable(program, f"{checked}'s #! line {named}")
    return found


def _why_not(path: str) -> str:
    try:
        info = os.stat(path)
    except OSError as err:  # ENOENT, ELOOP (a link loop), EACCES on a directory above, ...
        if err.errno == errno.ENOENT:
            return "is a link to nothing" if os.path.lexists(path) else "does not exist"
        return f"cannot be reached: {err.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a device, FIFO or socket)"
    return "is not an executable file (no execute bit)"


def yield_prefix(yielders: Yielders) -> list[str]:
    prefix: list[str] = []
    if yielders.ionice:
        prefix += [yielders.ionice, "-c", "2", "-n", "7"]
    if yielders.taskpolicy:
        prefix += [yielders.taskpolicy, "-c", "utility"]
    if yielders.nice:
        prefix += [yielders.nice, "-n", "10", "--"]
    return prefix
