"""Image recipes and the admin side of `sprawl-orch image`.

Library entry point for tests' fixtures and scripts::

    from sprawl_orch.images import build_busybox
    image_id = build_busybox("docker")   # "sha256:<64 hex>", ~0.2 s, nothing pulled
"""

from __future__ import annotations


def build_busybox(engine: str, *, tag: str | None = None) -> str:
    """Make the busybox image (images/recipes/busybox.toml) in `engine` ("docker" or
    "podman") from the host's static busybox; return its fixed ID `sha256:<64 hex>`."""
    # Imported here so `import images` (and the CLI's start) stays cheap.
    from sprawl_orch.images.build import build_busybox as build

    return build(engine, tag=tag)


__all__ = ["build_busybox"]
