"""docs/ARCHITECTURE.md stays true: every module of the four package folders is named in its
module map, and every module it names exists (checked by file name: the map is the one block
under 'Where each concern lives'; the layer picture above it is tests/unit/test_layers.py's)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("orchestrator", "guardian", "native_fallbacks", "images")


def test_the_module_map_names_every_module_and_only_real_ones() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    where = doc.split("## Where each concern lives", 1)[1]
    block = where.split("```text", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"\b([A-Za-z_0-9]+\.py)\b", block))
    named.discard("__init__.py")  # packages' faces (and config/'s model) are named, not counted
    actual = {
        p.name
        for top in FOLDERS
        for p in (ROOT / top).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    assert sorted(actual - named) == [], "modules the map does not name"
    assert sorted(named - actual) == [], "the map names modules that do not exist"
