"""The thin exec client and its server (issue 26) at the edges of a caller's process, by the
real program on copied_tree (atkspare, 2026-12-03):

- a caller whose working directory was deleted runs as it does in-process (the client's
  os.getcwd() raised: a traceback, status 1).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.unit.test_exec_client import PROGRAM, env, tree

__all__ = ["env", "tree"]  # the fixtures, shared with test_exec_client


def test_a_deleted_working_directory_runs_as_in_process(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    gone = tmp_path / "gone"
    places = [str(gone), PROGRAM, str(tree)]
    runs = {}
    for served in ("1", "0"):
        gone.mkdir()
        runs[served] = subprocess.run(
            ["sh", "-c", 'rmdir "$1" && exec "$2" exec -C "$3" -- echo hi', "-", *places],
            cwd=gone,
            env={**env, "SPRAWL_EXEC_SERVER": served},
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert (runs["0"].returncode, runs["0"].stdout) == (0, b"hi\n"), runs["0"].stderr
    assert (runs["1"].returncode, runs["1"].stdout) == (0, b"hi\n"), runs["1"].stderr
    assert b"Traceback" not in runs["1"].stderr
