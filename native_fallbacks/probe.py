"""Run a wrapper's probe command and say why it failed, in the wrapper's own words.

Shared by every host-process mechanism that must prove itself before a copy is made
(bwrap, sandbox-exec).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

PROBE_TIMEOUT_S = 10.0
# Enough of the wrapper's own words to say what refused; their messages are one line each.
STDERR_KEEP = 2000


def run_probe(
    argv: Sequence[str], wrapper: str, *, pass_fds: Sequence[int] = (), user: int | None = None
) -> tuple[bool, str]:
    """(True, "") when the probe exited 0, else (False, why with the wrapper's stderr)."""
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": os.defpath},
            timeout=PROBE_TIMEOUT_S,
            start_new_session=True,
            check=False,
            pass_fds=tuple(pass_fds),
            user=user,
            group=user,
            extra_groups=None if user is None else [],
        )
    except subprocess.TimeoutExpired:
        return False, f"the probe did not finish within {PROBE_TIMEOUT_S:g} s"
    except OSError as err:
        return False, f"{argv[0]} could not be started: {err.strerror or err}"
    if done.returncode == 0:
        return True, ""
    said = done.stderr.decode("utf-8", errors="replace").strip()[:STDERR_KEEP]
    return False, f"exit {done.returncode}: {said or f'({wrapper} printed nothing)'}"
