"""gVisor's runsc as an OCI runtime: the wrapper podman is given by path.

runsc (Debian's 0.0~20221219) refuses to start a container whose network namespace
is the root one: "cannot run with network enabled in root network namespace" — and
every sandbox here runs `--network none`, which podman hands to the runtime as no
namespace of its own. runsc's `--network=none` (a global flag, before the subcommand)
gives the sandbox gVisor's own empty network stack instead. podman passes no global
flags of our choosing to a runtime, so the runtime it is told to use is a two-line
wrapper that execs runsc with the flag.

Why sprawl-orch writes the wrapper (into its state dir) rather than .ci/setup-engines
installing it: the product must work wherever Debian's runsc is installed, not only on
machines prepared by this repo's CI; and podman reports the runtime path it was given
as `OCIRuntime`, so the path verification compares is one sprawl-orch chose itself.
The wrapper is rewritten when its content differs (a tampered or stale one is not
trusted) and is written atomically (rename) so a concurrent command never execs half
a file.

Not yet wired into admission/argv (issue 17 item 2): see docs/MACHINES.md "gVisor".
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

RUNSC = "runsc"
WRAPPER_NAME = "runsc-nonet"


def runsc_path(path: str | None = None) -> str | None:
    """The installed runsc (None: not installed)."""
    return shutil.which(RUNSC, path=path)


def wrapper_text(runsc: str) -> str:
    return f'#!/bin/sh\nexec {runsc} --network=none "$@"\n'


def ensure_wrapper(state: Path, runsc: str) -> Path:
    """The wrapper in `state` exec'ing `runsc` with --network=none; (re)written when absent
    or different, mode 0755, by atomic rename."""
    target = state / WRAPPER_NAME
    want = wrapper_text(runsc)
    try:
        if target.read_text() == want and os.access(target, os.X_OK) and not target.is_symlink():
            return target
    except OSError:
        pass
    state.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{WRAPPER_NAME}-", dir=state)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(want)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
