"""Whether a warm container can execve a command's program, judged from the host.

A fresh container's runtime refuses an unrunnable program at start, and arm.py turns its
words into E_TOOL_UNAVAILABLE before anything ran. An exec into a running container only
exits 126/127 afterwards (docker's exec stream even drops the runtime's words), so warm.py
asks first: the program is looked up inside the container's own root (/proc/<init>/root),
symlinks resolved against that root, on the image's PATH or relative to the working
directory, as runc would. Only a certain "cannot run" is said (the runc words that
unrunnable.runtime_refusal reads); anything else is left to the exec.
"""

from __future__ import annotations

import os
import stat

MAX_LINKS = 40
# What runc (and so docker and podman) search when the image's config sets no PATH.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def inside(root: str, path: str) -> str | None:
    """The host path of container path `path` under `root`, symlinks resolved inside the
    container; None when some component does not exist."""
    parts = [p for p in path.split("/") if p]
    here: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            here = here[:-1]
            continue
        host = "/".join([root, *here, part])
        try:
            st = os.lstat(host)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                return None
            target = os.readlink(host)
            if target.startswith("/"):
                here = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        here.append(part)
    return "/".join([root, *here])


def _runnable(host: str | None) -> bool:
    try:
        st = os.stat(host) if host else None
    except OSError:
        return False
    return st is not None and stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111)


def cannot_run(root: str, program: str, path: str | None, workdir: str) -> str | None:
    """runc's words when `program` certainly cannot be executed in the container, else None."""
    if "/" in program:
        full = program if program.startswith("/") else f"{workdir}/{program}"
        host = inside(root, full)
        if host is None:
            return f'exec: "{program}": no such file or directory'
        return None if _runnable(host) else f'exec: "{program}": permission denied'
    for directory in (path or DEFAULT_PATH).split(":"):
        if directory and _runnable(inside(root, f"{directory}/{program}")):
            return None
    return f'exec: "{program}": executable file not found in $PATH'
