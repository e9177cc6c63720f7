"""The kernel's bound on a command's arguments, checked before anything is started (issue 30).

Linux refuses an execve with E2BIG when one string (argument or environment entry) is longer
than MAX_ARG_STRLEN (32 pages: 131072 bytes) or all of them, with their pointers, pass the
limit `sysconf(ARG_MAX)` reports. A 50 MB shell line -- one argument -- came back as
`E_INTERNAL ... report this` from the first exec in the chain (ionice) on native and
copied_tree, and a container's runtime fails it inside the container. So every arm refuses
it here, the same way, naming the numbers, before a copy is leased or a container made.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

from sprawl_orch.core.errors import ErrorCode, SprawlError

MAX_ARG_STRLEN = 32 * 4096
# The wrappers an arm puts before the command (nice, ionice, bwrap and its view, docker's
# argv) and their environment: room kept below ARG_MAX for them.
WRAPPER_ROOM = 64 * 1024
POINTER = 8
# The most a window may be: past 2**31 - 1 ms a poll() timeout overflows C's int.
MAX_WINDOW_S = 2_000_000.0


def check_window(window: float | None) -> float | None:
    """``window`` if it is None or a finite number of seconds in (0, MAX_WINDOW_S]; else
    E_BAD_REQUEST. `nan` kept no window at all (every comparison with it is false: the
    command ran unbounded) and `inf` ended in an OverflowError as E_INTERNAL (atkaction)."""
    if window is None or (math.isfinite(window) and 0 < window <= MAX_WINDOW_S):
        return window
    raise SprawlError(
        ErrorCode.BAD_REQUEST,
        "exec window",
        f"{window!r} seconds is not a window: it must be a finite number above 0 and at "
        f"most {MAX_WINDOW_S:,.0f}",
        "give window= (or the CLI's --timeout) a number of seconds such as 120",
    )


def arg_max() -> int:
    try:
        value = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError, AttributeError):
        # no sysconf answer: Linux's default 2 MiB (below) is the bound assumed
        value = -1
    return value if value > 0 else 2 * 1024 * 1024


def check_arguments(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Raise E_BAD_REQUEST when `argv` (with `env`) cannot be exec'd on this kernel."""
    strings = [*argv, *(f"{k}={v}" for k, v in env.items())]
    for n, s in enumerate(argv):
        size = len(os.fsencode(s)) + 1
        if size > MAX_ARG_STRLEN:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                "command",
                f"argument {n} is {size} bytes; the kernel refuses any single argument over "
                f"{MAX_ARG_STRLEN} bytes (MAX_ARG_STRLEN, E2BIG)",
                "pass large input through a file in the working directory, or stdin, not "
                "the command line",
            )
    for name, value in env.items():
        size = len(os.fsencode(f"{name}={value}")) + 1
        if size > MAX_ARG_STRLEN:
            # attack3: only argv was measured; a passed-through variable of 200 kB raised
            # a bare OSError(E2BIG) from ionice out of ExecTool.exec. Named, never shown.
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                "environment",
                f"the environment variable {name} is {size} bytes; the kernel refuses any "
                f"single environment entry over {MAX_ARG_STRLEN} bytes (MAX_ARG_STRLEN, E2BIG)",
                f"pass what {name} holds through a file in the working directory, or drop it "
                "from [sandbox] env_passthrough",
            )
    total = sum(len(os.fsencode(s)) + 1 + POINTER for s in strings)
    limit = arg_max() - WRAPPER_ROOM
    if total > limit:
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            "command",
            f"the arguments and environment come to {total} bytes; this kernel's limit "
            f"(ARG_MAX {arg_max()}, less {WRAPPER_ROOM} for the sandbox's wrappers) is "
            f"{limit} (E2BIG)",
            "pass large input through a file in the working directory, or fewer arguments "
            "(xargs splits a list)",
        )
