"""The wheel installs the four folders under one import root, `sprawl_orch` (pyproject's
package-dir): every folder with an __init__.py must be listed, or an install silently lacks it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "orchestrator": "sprawl_orch",
    "guardian": "sprawl_orch.guardian",
    "native_fallbacks": "sprawl_orch.native_fallbacks",
    "images": "sprawl_orch.images",
}


def test_every_package_folder_is_installed_under_sprawl_orch() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {name: folder for folder, name in FOLDERS.items()}
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    assert sorted(found) == sorted(setuptools["packages"])
