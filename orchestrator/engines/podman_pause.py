"""Podman's rootless pause process, named for what it is.

Rootless podman keeps one `podman` process per account that holds the account's user
namespace for all its rootless containers (`<run dir>/libpod/tmp/pause.pid`); it outlives
every command by design and `podman system migrate` ends it. An outsider saw one left after
`doctor` as a non-root account and took it for our leftover (issue 27, item 16): doctor now
says whose it is. We never kill it (another container of the account may need it), and doctor
starts none when the config asks for docker only (podman is not examined then).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def pause_pid(environ: Mapping[str, str], uid: int | None = None) -> int | None:
    """The live pause process of this account's rootless podman, or None (root, none, gone)."""
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return None  # rootful podman keeps no pause process
    runtime = environ.get("XDG_RUNTIME_DIR") or f"/tmp/podman-run-{uid}"
    try:
        pid = int((Path(runtime) / "libpod" / "tmp" / "pause.pid").read_text().strip())
        exe = os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError):
        return None  # no pause file, a torn one, or its process is gone: nothing to name
    return pid if os.path.basename(exe) == "podman" else None


def pause_note(environ: Mapping[str, str], uid: int | None = None) -> str | None:
    pid = pause_pid(environ, uid)
    if pid is None:
        return None
    return (
        f"podman's rootless pause process (pid {pid}) holds this account's user namespace for "
        "all its rootless containers: it is podman's, not a leftover of sprawl-orch, and stays "
        "(`podman system migrate` ends it)"
    )
