"""host_which: sprawl-orch's own programs come from PATH's absolute entries only (an empty or
relative entry is the cwd, where the tree's own `podman` waited; tests/escapes/test_shaping.py
runs the attack end to end)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.core.host_which import absolute_entries, host_which


def program(where: Path, name: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    prog = where / name
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    return prog


def test_empty_and_relative_entries_are_never_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program(tmp_path, "sprawl-probe-prog")
    program(tmp_path / "bin", "sprawl-probe-prog")
    monkeypatch.chdir(tmp_path)
    for path in (":/usr/bin", "/usr/bin:", "/usr/bin::/bin", ".:/usr/bin", "bin:/usr/bin"):
        assert host_which("sprawl-probe-prog", path) is None, path


def test_an_absolute_entry_gives_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = program(tmp_path / "tools", "sprawl-probe-prog")
    monkeypatch.chdir(tmp_path)
    program(tmp_path, "sprawl-probe-prog")  # first in PATH's order, but relative
    assert host_which("sprawl-probe-prog", f":{tmp_path / 'tools'}") == str(real)
    monkeypatch.setenv("PATH", f"bin:{tmp_path / 'tools'}")
    assert host_which("sprawl-probe-prog") == str(real)


def test_a_relative_path_is_refused_an_absolute_one_kept(tmp_path: Path) -> None:
    real = program(tmp_path, "prog")
    assert host_which("./prog", "/usr/bin") is None
    assert host_which(str(real), "") == str(real)


def test_absolute_entries() -> None:
    assert absolute_entries(f"::a:/x:./b:/y{os.pathsep}") == "/x:/y"
