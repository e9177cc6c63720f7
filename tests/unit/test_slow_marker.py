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
    def __init__(self, rel: str) -> None:
        self.path = ROOT / rel
        self.marks: list[str] = []

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name)


def test_every_slow_file_exists() -> None:
    assert [p for p in SLOW_FILES if not (ROOT / p).exists()] == []


def test_the_slow_files_are_marked_and_the_rest_are_not() -> None:
    items = [
        Item("tests/escapes/test_escapes.py"),
        Item("tests/integration/test_serve_load.py"),
        Item("tests/integration/test_container_arm.py"),
        Item("tests/unit/test_slow_marker.py"),
    ]
    pytest_collection_modifyitems(cast(Any, None), cast(Any, items))
    assert [item.marks for item in items] == [["slow"], ["slow"], [], []]
