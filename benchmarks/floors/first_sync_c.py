"""The C floor of a checked first sync (issue 23), for benchmarks/copy_sync.py: first_sync.c,
compiled at run time with ``cc`` when there is one (the row is printed as absent otherwise).

Why a C row: the Python floor (first_sync.py) makes the fewest checked system calls per file
but pays the interpreter on each; the C program makes the same calls with no interpreter, so
its ratio to ``cp -a`` is what the mechanism itself allows on this machine and filesystem.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("first_sync.c")


def build(where: Path) -> Path | None:
    """The compiled floor in ``where``, or None when there is no C compiler (or it failed:
    its error is printed, the benchmark goes on without the row)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    program = where / "first_sync_floor"
    done = subprocess.run(
        [cc, "-O2", "-pthread", "-o", str(program), str(SOURCE)], capture_output=True, text=True
    )
    if done.returncode != 0:
        print(f"the C floor did not compile ({cc}): {done.stderr.strip()[:300]}")
        return None
    return program


def c_floor_copy(program: Path, src: str, dst: str, threads: int) -> float:
    """Copy ``src`` into the new directory ``dst`` with the C floor; its own wall time in ms
    (from its first system call to its last: no exec, no interpreter start)."""
    out = subprocess.run(
        [str(program), src, dst, str(threads)], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]) / 1e6
