"""Host-side commands run one level below the orchestrator (SPEC §7).

`nice -n 10 --` (with `ionice -c 2 -n 7` outside it when present; macOS: `taskpolicy
-c utility`). The program is checked the way execvp finds it *before* wrapping:
a missing program would otherwise surface as a confusing exit 127 from nice.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.errors import ErrorCode, SprawlError


@dataclass(frozen=True)
class Yielders:
    nice: str | None
    ionice: str | None
    taskpolicy: str | None = None


def find_program(program: str, env: Mapping[str, str], cwd: str) -> str:
    """Resolve like execvp: a name with a slash is a path (relative to cwd); else the
    first executable match on the child's PATH."""
    if "/" in program:
        path = program if os.path.isabs(program) else os.path.join(cwd, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return program
        why = "does not exist" if not os.path.exists(path) else "is not an executable file"
        raise _unavailable(program, f"{path} {why}")
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise _unavailable(program, f"not found on PATH={env.get('PATH', os.defpath)}")
    return found


def _unavailable(program: str, why: str) -> SprawlError:
    return SprawlError(
        ErrorCode.TOOL_UNAVAILABLE,
        subject=program,
        detail=why,
        recovery="check the program name, or use the shell arm (--shell)",
    )


def yield_prefix(yielders: Yielders) -> list[str]:
    prefix: list[str] = []
    if yielders.ionice:
        prefix += [yielders.ionice, "-c", "2", "-n", "7"]
    if yielders.taskpolicy:
        prefix += [yielders.taskpolicy, "-c", "utility"]
    if yielders.nice:
        prefix += [yielders.nice, "-n", "10", "--"]
    return prefix
