"""No import circle among sprawl_orch's modules -- counting every import: module-level,
function-level and under TYPE_CHECKING (a function-level import hides a circle from Python,
not from the reader; design.md and ARCHITECTURE.md describe layers).

A circle is a strongly connected set of modules of the import graph (Tarjan). The way out is
always the same: the piece both modules need moves to a leaf module (e.g. guardian/_lifeline.py,
engine_offer.py, container/command.py, native_fallbacks/job_plan.py)."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def modules() -> dict[str, Path]:
    """Every module by its import name (pyproject's package-dir maps folders to names)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    found = {}
    for name, folder in package_dir.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((name, *parts))] = path
    return found


def imports(path: Path, known: Mapping[str, Path]) -> set[str]:
    """The known modules `path` imports anywhere in its text. `from a import b` imports the
    module a.b when it is one, else a itself."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import (the package imports absolutely)"
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            out.update(subs)
            if not subs <= known.keys():
                out.add(node.module)
    return out & known.keys()


def circles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """The strongly connected sets of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            members = set()
            while True:
                member = stack.pop()
                members.add(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(frozenset(members))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_finder_finds_circles_it_is_shown() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set[str]()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    known = modules()
    assert "sprawl_orch.guardian.protocol" in imports(known["sprawl_orch.runs.launch"], known)


def test_no_import_circles() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    found = sorted(sorted(circle) for circle in circles(graph))
    assert found == [], "import circles: move what the modules share to a leaf module"
