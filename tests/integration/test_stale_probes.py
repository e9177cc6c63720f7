"""A probe container left by a process that died mid-admission is removed by the next
admission, on real docker and podman; a live owner's probe is left alone."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from sprawl_orch.container.admission import admit, clear_cache
from sprawl_orch.container.stale_probes import PROBE_SESSION, owner_label
from tests.integration.container_support import config_for, make_engine


@pytest.fixture(autouse=True)
def fresh_admissions() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def create_probe_like(engine: str, image: str, owner: str) -> str:
    argv = [
        engine,
        "create",
        "--label",
        f"sprawl.session={PROBE_SESSION}",
        "--label",
        f"sprawl.run={owner}",
        "--network",
        "none",
        image,
        "true",
    ]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def exists(engine: str, container: str) -> bool:
    done = subprocess.run([engine, "inspect", container], capture_output=True, check=False)
    return done.returncode == 0


def test_admission_removes_probes_of_dead_owners(engine_image: tuple[str, str]) -> None:
    name, image = engine_image
    # pid 1 exists, but not with this create time: a dead owner whose pid was reused.
    dead = create_probe_like(name, image, "1.12345.000")
    alive = create_probe_like(name, image, owner_label())
    try:
        admission = admit(make_engine(name), config_for(name, image))
        assert admission.admitted, admission.reason
        assert not exists(name, dead)
        assert exists(name, alive)
    finally:
        subprocess.run([name, "rm", "-f", dead, alive], capture_output=True, check=False)
