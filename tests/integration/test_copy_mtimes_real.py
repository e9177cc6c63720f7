"""The copy keeps modification times on every Linux arm (issue 23): a `.pyc` compiled against
the person's tree stays valid in the copy, so running Python there changes nothing.

Before mtimes were kept, every copy file carried the sync's "now": the interpreter found each
`.pyc` stale, rewrote it, and every command reported those rewrites as changes.
"""

from __future__ import annotations

import compileall
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing
from tests.integration.test_changes_real import _config

# 2020-01-02 03:04:05.123456789 UTC: far from "now", with nanoseconds a copy must keep.
OLD_NS = 1_577_934_245_123_456_789


def _project(tree: Path) -> None:
    pkg = tree / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.mod import VALUE\n")
    (pkg / "mod.py").write_text("VALUE = 42\n")
    for path in (pkg / "__init__.py", pkg / "mod.py"):
        os.utime(path, ns=(OLD_NS, OLD_NS))
    python = shutil.which("python3")
    assert python is not None
    # Compiled by the host's interpreter, against the person's tree (as a venv is).
    assert compileall.compile_dir(str(pkg), quiet=1)
    os.utime(pkg, ns=(OLD_NS, OLD_NS + 7))


def _tool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    tree = tmp_path / "tree"
    _project(tree)
    (tmp_path / "scratch").mkdir()
    with ExecTool(_config(tmp_path, request.param, request), tree) as t:
        want = "container" if request.param in ("docker", "podman") else request.param
        if t.choice.arm.value != want:
            missing(f"the {request.param} arm is not available here (chose {t.choice.arm.value})")
        yield t


@pytest.fixture(params=["docker", "podman", "linux_namespaces", "copied_tree"])
def tool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    yield from _tool(request, tmp_path)


# The host's interpreter runs on the arms that see the host's /usr.
@pytest.fixture(params=["linux_namespaces", "copied_tree"])
def native_tool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    yield from _tool(request, tmp_path)


def test_the_copy_shows_the_source_mtimes(tool: ExecTool) -> None:
    # %Y is whole seconds in both busybox and coreutils stat; the nanoseconds are checked on
    # the copy itself by the unit tests (tests/unit/test_copy_sync.py).
    result = tool.exec(["stat", "-c", "%Y %n", "pkg/mod.py", "pkg"])
    assert result.exit_code == 0, result
    seconds = [str(OLD_NS // 10**9), "pkg/mod.py", str((OLD_NS + 7) // 10**9), "pkg"]
    assert result.stdout.split() == seconds


def test_a_pyc_compiled_against_the_source_stays_valid(native_tool: ExecTool) -> None:
    tool = native_tool
    python = os.path.realpath(shutil.which("python3") or "python3")
    for _ in range(2):
        result = tool.exec([python, "-c", "import pkg; assert pkg.VALUE == 42"])
        assert result.exit_code == 0, result
        assert result.changes is not None
        assert result.changes.total == 0, result.changes.paths
