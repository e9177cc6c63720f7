"""What a served call no longer pays per fork (issue 26): the warm modules are imported by
the exec server before it forks, and admission's key reads the installed version once per
process while still stamping the arm's sources on every call."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sprawl_orch.container import evidence
from sprawl_orch.core.dist_version import installed_version

WARM = sorted(
    f"sprawl_orch.container.{p.stem}" for p in Path(evidence.__file__).parent.glob("warm*.py")
)


def test_the_server_start_imports_every_warm_module() -> None:
    # a fresh interpreter: this one's sys.modules holds whatever other tests imported
    code = (
        "import sys; from sprawl_orch.cli.exec_server import preload; preload(); "
        f"print([m for m in {WARM!r} if m not in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(WARM) >= 7 and done.stdout.strip() == "[]"


def test_the_installed_version_is_read_once_and_the_sources_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    original = importlib.metadata.version

    def counted(name: str) -> str:
        reads.append(name)
        return original(name)

    monkeypatch.setattr(importlib.metadata, "version", counted)
    source = tmp_path / "admission_rule.py"
    source.write_text("RULE = 1\n")
    monkeypatch.setattr(evidence, "_SOURCES", (tmp_path,))
    installed_version.cache_clear()
    first = evidence.version()
    assert evidence.version() == first
    time.sleep(0.01)  # a later mtime even on a coarse clock
    source.write_text("RULE = 22\n")
    edited = evidence.version()
    assert edited != first and edited.split("+")[0] == first.split("+")[0]
    assert reads == ["sprawl-orch"]
    installed_version.cache_clear()
