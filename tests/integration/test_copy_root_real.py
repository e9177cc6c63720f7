"""A command cannot break its own copy (issue 27, item 4): after `chmod 000 .` in the copy,
every later command failed (docker/podman: `ls: .: Permission denied`; native: `bwrap: Can't
chdir`) until `copies drop --here`, because each sync restored every directory but the root.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.test_copy_mtimes_real import _tool


@pytest.fixture(params=["docker", "podman", "linux_namespaces", "copied_tree"])
def tool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    yield from _tool(request, tmp_path)


def test_chmod_000_of_the_copy_root_is_undone_by_the_next_sync(tool: ExecTool) -> None:
    broke = tool.exec(["sh", "-c", "chmod 000 pkg; chmod 000 ."])
    assert broke.exit_code == 0, broke
    for _ in range(2):  # and stays usable
        result = tool.exec(["ls", "pkg"])
        assert result.exit_code == 0, result
        assert "mod.py" in result.stdout.split(), result
