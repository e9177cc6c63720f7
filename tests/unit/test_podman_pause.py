"""Which process is podman's rootless pause process (issue 27, item 16), never a guess."""

from __future__ import annotations

import os
from pathlib import Path

from sprawl_orch.engines.podman_pause import pause_note, pause_pid


def _pause_file(tmp_path: Path, text: str) -> dict[str, str]:
    where = tmp_path / "libpod" / "tmp"
    where.mkdir(parents=True)
    (where / "pause.pid").write_text(text)
    return {"XDG_RUNTIME_DIR": str(tmp_path)}


def test_a_pid_that_is_not_podman_is_not_named(tmp_path: Path) -> None:
    env = _pause_file(tmp_path, str(os.getpid()))  # this interpreter, not podman
    assert pause_pid(env, uid=1234) is None and pause_note(env, uid=1234) is None


def test_no_file_a_torn_one_or_root_name_nothing(tmp_path: Path) -> None:
    assert pause_pid({"XDG_RUNTIME_DIR": str(tmp_path)}, uid=1234) is None
    env = _pause_file(tmp_path, "not a pid")
    assert pause_pid(env, uid=1234) is None
    assert pause_pid(env, uid=0) is None
