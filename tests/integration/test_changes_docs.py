"""docs/changes.md's example sessions run as written: the sh block through the real CLI (on
PATH as `sprawl-orch`), the python block in a fresh interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "changes.md"


def block(lang: str) -> str:
    found = re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(found) == 1, f"docs/changes.md should hold one ```{lang} block"
    return str(found[0])


def test_the_cli_session_runs(tmp_path: Path) -> None:
    # `sprawl-orch` as installed beside this interpreter (the venv's bin, or CI's).
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", block("sh")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_python_session_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", block("python")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "-x=1\n+x = 1\n" in done.stdout
