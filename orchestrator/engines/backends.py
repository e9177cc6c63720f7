"""The one way to get an engine backend by name: the container arm (admission), the guardian's
sweep and the image admin all start here, so all three reach the same binary (PATH's absolute
entries only, core/host_which.py) and the same daemon."""

from __future__ import annotations

from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.engines.podman import PodmanEngine


def backend(name: str, docker_host: str | None = None) -> DockerEngine | PodmanEngine:
    """`docker_host`: [sandbox.container] docker_host (None: $DOCKER_HOST). Cheap: nothing is
    asked of the engine, and the docker SDK is not imported, until a method needs it."""
    if name == "docker":
        return DockerEngine(docker_host)
    if name == "podman":
        return PodmanEngine()
    raise ValueError(f"unknown engine {name!r}; expected one of {ENGINES}")
