"""Which engines the guardian sweeps, and through what: the one engine layer's backends
(engines/docker.py, engines/podman.py) as engines/sweep.py asks them. Nothing here imports
the docker SDK: the guardian starts at every session's first command (see sweep.py for what
the SDK would cost and gain).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from sprawl_orch.engines.backends import backend
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.sweep import SWEEP_TIMEOUT, Found, Sweep


class ReaperEngine(Protocol):
    """An engine as the guardian uses it: find a session's containers, remove them (Sweep;
    tests stand fakes in). Running commands is engines.engine.ContainerEngine; making images,
    engines.images.ImageStore (images.engines.ImageEngine builds on it)."""

    name: str

    def find(self, session: str, names: Collection[str]) -> list[Found]: ...

    def remove(self, refs: Collection[str]) -> list[str]: ...


def open_engine(name: str, docker_via: str = "cli") -> ReaperEngine | None:
    """The sweep for `name`, or None when its CLI is not installed here."""
    if name == "docker" and docker_via == "sdk":
        docker = DockerEngine(api_timeout=SWEEP_TIMEOUT)
        try:
            # asks the daemon's API version now, so an unreachable one falls back to the CLI
            docker.api()
            return Sweep(docker, sdk=True)
        except Exception:
            pass  # no SDK or no reachable daemon: the CLI can still say why
    found = backend(name)
    return Sweep(found) if found.cli else None
