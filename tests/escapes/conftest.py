"""The escape suite's fixtures: the integration tests' engine images (the same pinned
busybox rootfs, imported per engine; a missing engine fails in CI, see
tests/integration/conftest.py) and the matrix written once at the end of the session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.escapes import matrix
from tests.escapes.probe import Verdict
from tests.escapes.runner import ArmRun
from tests.integration.conftest import docker_image, docker_userns, podman_image

__all__ = ["docker_image", "docker_userns", "podman_image"]

ROWS: list[tuple[ArmRun, list[Verdict]]] = []
MATRIX = Path(os.environ.get("SPRAWL_ESCAPE_MATRIX", "build/escape-matrix.md"))


@pytest.fixture(scope="session")
def matrix_rows() -> Iterator[list[tuple[ArmRun, list[Verdict]]]]:
    yield ROWS
    if ROWS:
        matrix.write(MATRIX, ROWS)
        print(f"\nescape matrix written to {MATRIX.resolve()}\n{matrix.table(ROWS)}")
