"""Admission probes left behind by a process that died mid-probe, removed by the next one.

Admission runs before any guardian exists (the guardian starts with the first sandboxed
command), so a probe container is labelled with its owner instead: `sprawl.run=<pid>.<create
time>`. Admission first removes every probe whose owner is no longer that process.
"""

from __future__ import annotations

import contextlib

import psutil

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.engines.engine import ContainerEngine

PROBE_SESSION = "admission"


def owner_label(pid: int | None = None) -> str:
    proc = psutil.Process(pid)
    return f"{proc.pid}.{proc.create_time():.3f}"


def owner_alive(label: str) -> bool:
    pid_text, _, created = label.partition(".")
    try:
        proc = psutil.Process(int(pid_text))
        return f"{proc.create_time():.3f}" == created  # a reused pid is another process
    except (ValueError, psutil.Error):
        return False


def sweep_stale_probes(engine: ContainerEngine) -> list[str]:
    """Remove probe containers whose owner died; returns the IDs removed."""
    removed: list[str] = []
    with contextlib.suppress(SprawlError):
        for container in engine.list_labelled(f"sprawl.session={PROBE_SESSION}"):
            with contextlib.suppress(SprawlError):
                labels = (engine.inspect(container).get("Config") or {}).get("Labels") or {}
                if not owner_alive(str(labels.get("sprawl.run", ""))):
                    engine.remove(container)
                    removed.append(container)
    return removed
