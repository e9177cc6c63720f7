from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sprawl_orch.config import Config, parse_config
from sprawl_orch.selection.offerings import Offerings


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path


@pytest.fixture
def offerings(scratch: Path) -> Offerings:
    """A described machine: nice/ionice present, nothing else."""
    return Offerings(
        platform="linux", scratch=scratch, nice=shutil.which("nice"), ionice=shutil.which("ionice")
    )


def make_config(tmp_path: Path, **sandbox: object) -> Config:
    return parse_config({"sandbox": dict(sandbox), "state": {"dir": str(tmp_path / "state")}})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('a')\n")
    (root / "README").write_text("readme\n")
    return root
