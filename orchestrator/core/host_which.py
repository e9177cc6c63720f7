"""sprawl-orch's own programs (bwrap, nice, ionice, docker, podman, runsc) found on PATH by
its absolute entries only, as an absolute path.

An empty PATH entry (`PATH=:/usr/bin`, left by `export PATH=$EXTRA:$PATH` with EXTRA unset)
or a relative one (`.`, `node_modules/.bin`) means the current directory. shutil.which
honours them and returns a relative name, which Popen then resolves against the command's
cwd: the copy of the tree. With `PATH=:$PATH` the attack suite saw a tree's own `ionice`,
`bwrap` and `podman` run on the host, outside every sandbox, podman as root
(tests/escapes/test_shaping.py). The command's own program is still looked up on its PATH
as given, inside its sandbox: that lookup is the command's business.
"""

from __future__ import annotations

import os
import shutil


def absolute_entries(path: str) -> str:
    """`path` without its empty and relative entries."""
    return os.pathsep.join(e for e in path.split(os.pathsep) if os.path.isabs(e))


def host_which(program: str, path: str | None = None) -> str | None:
    """Like shutil.which(program, path=path) (None: this process's PATH), but only absolute
    PATH entries are searched and the answer is absolute."""
    searched = os.environ.get("PATH", os.defpath) if path is None else path
    if os.sep in program and not os.path.isabs(program):
        return None  # a relative path names a file beside the cwd, never one of ours
    found = shutil.which(program, path=absolute_entries(searched))
    return os.path.abspath(found) if found is not None else None
