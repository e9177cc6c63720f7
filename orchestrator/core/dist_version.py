"""sprawl-orch's installed version, read once per process.

`importlib.metadata.version` scans every `sys.path` entry's distributions (~16 ms of each
served call under load, issue 26). The exec server reads it at its start (cli/exec_server.py
preload), so every fork has it; a newer install under a running server is not the code that
server runs anyway (its modules are in memory).
"""

from __future__ import annotations

import functools


@functools.cache
def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("sprawl-orch")
    except PackageNotFoundError:
        return "unknown"
