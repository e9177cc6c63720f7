"""`pytest -m "not slow"` is the quick local run: the files of tests/slow_files.py get the mark,
the rest do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import pytest_collection_modifyitems
from tests.slow_files import SLOW_FILES

ROOT = Path(__file__).resolve().parents[2]


class Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.marks: list[str] = []

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name)


def test_every_slow_file_exists() -> None:
    assert [p for p in SLOW_FILES if not (ROOT / p.split("::")[0]).exists()] == []


def test_the_slow_files_are_marked_and_the_rest_are_not() -> None:
    items = [
        Item("tests/escapes/test_escapes.py::test_x[docker]"),
        Item("tests/integration/test_serve_load.py::test_y"),
        Item("tests/integration/test_mcp_real.py::test_soak_200_calls_leave_nothing"),
        Item("tests/integration/test_mcp_real.py::test_warm_switch"),
        Item("tests/integration/test_container_arm.py::test_z[podman]"),
        Item("tests/unit/test_slow_marker.py::test_every_slow_file_exists"),
    ]
    pytest_collection_modifyitems(cast(Any, None), cast(Any, items))
    assert [item.marks for item in items] == [["slow"], ["slow"], ["slow"], [], [], []]
