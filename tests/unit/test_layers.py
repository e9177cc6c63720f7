"""The layer rule: which room of sprawl_orch may import which (issue 28).

A room is a package folder (orchestrator/core/, orchestrator/runs/, guardian/, ...). LAYERS lists
the rooms from the ground floor up, each with what it may import: whole rooms below it, or -- where
only one module below is meant -- that module. Every import between two rooms is checked against
it, counting module-level, function-level and TYPE_CHECKING imports alike (the circles test's
reading). An import the table does not allow fails, unless CROSSINGS names it with its reason:
those are known crossings, each to be removed by the issue that names it, and an entry whose
import is gone fails too, so the list only shrinks. docs/ARCHITECTURE.md carries the table as
`picture()` draws it; the test keeps the two the same. A private module (``_name.py``) is
imported only by its own package (private_violations).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.unit.test_import_circles import ROOT, imports, modules

FACE = "sprawl_orch"  # orchestrator/__init__.py: the public face, free to import any room

# From the ground floor up. A room may import only what its row names (and itself).
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (),
    "engines": ("core",),
    "copy": ("core",),
    # The allow-list's rules, proxy and namespace listener (issue 24): below config, which
    # validates entries with its rules, and runs, whose Launch carries its plan.
    "egress": ("core",),
    "changes": ("core", "copy"),
    "config": ("core", "engines", "copy", "egress"),
    "guardian": ("core", "engines"),
    # Issue 25: a secret's run (placeholders, per-run CA, the interception), handed to the
    # proxy as an egress.interceptor.Interceptor; its table's shape is checked in config.
    "secrets": ("core", "egress", "config"),
    # launch.py's Watcher has one method per row of the guardian's message table, and the
    # guardian client speaks it (design §4): the protocol module alone, not the guardian.
    "runs": ("core", "engines", "copy", "changes", "config", "egress", "guardian.protocol"),
    # The arms start runs (launch) and read cgroup counters; the rest of runs/ stands above them.
    "container": (
        "core",
        "engines",
        "config",
        "egress",
        "runs.launch",
        "runs.cgroup_counters",
        "runs.proxied",
    ),
    "native_fallbacks": (
        "core",
        "config",
        "egress",
        "runs.launch",
        "runs.process",
        "runs.proxied",
        "runs.yielding",
    ),
    # What every command-line surface shares (-C/--config, the refusal on exit 125).
    "surface": ("core", "config"),
    "images": ("core", "engines", "config", "surface"),
    "selection": (
        "core",
        "engines",
        "config",
        "egress",
        "runs",
        "container",
        "native_fallbacks",
    ),
    "tool": (
        "core",
        "config",
        "egress",
        "secrets",
        "copy",
        "changes",
        "runs",
        "container.evidence",
        "native_fallbacks.host",
        "selection",
    ),
    "serve": ("core", "config", "changes", "runs", "selection", "tool"),
    "cli": (
        "core",
        "config",
        "copy",
        "changes",
        "runs",
        "container.offer",
        "selection",
        "images",
        "serve",
        "surface",
        "tool",
        # the exec server holds the python arm's runtime for its calls (issue 31)
        "native_fallbacks.wasi_shared",
    ),
    # The thin exec client (issue 26): standard library only; the in-process CLI is its
    # fallback (and every other subcommand), imported only when it runs.
    "client": ("core", "cli"),
}

# Imports that cross the layers today (issue 28 names them), each with why it is there and what
# removes it. Written as (importer, imported) under sprawl_orch.
# None today: the last, guardian.reaper -> copy.sync (the guardian deleted a scratch copy with the
# copy's own delete_path), went when the one tree removal moved to core/removal.py.
CROSSINGS: dict[tuple[str, str], str] = {}


def room(module: str) -> str:
    """The room a module stands in: the first name under sprawl_orch ("" for the face)."""
    assert module == FACE or module.startswith(FACE + "."), module
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _under(module: str, entry: str) -> bool:
    full = f"{FACE}.{entry}"
    return module == full or module.startswith(full + ".")


def violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Every import between two rooms that LAYERS does not allow and CROSSINGS does not name."""
    found = []
    for module, targets in sorted(graph.items()):
        here = room(module)
        if module == FACE:
            continue
        for target in sorted(targets):
            there = room(target)
            if there == here:
                continue
            allowed = any(_under(target, entry) for entry in LAYERS.get(here, ()))
            short = (module.removeprefix(FACE + "."), target.removeprefix(FACE + "."))
            if not allowed and short not in CROSSINGS:
                found.append(f"{module} -> {target}")
    return found


def private_violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Imports of a private module (``_name.py``, as psutil's ``_pslinux`` or httpx's
    ``_client``: implementation its package keeps to itself) from outside its own package."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            package, _, last = target.rpartition(".")
            private = last.startswith("_") and not last.startswith("__")
            if private and module.rpartition(".")[0] != package:
                found.append(f"{module} -> {target}")
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def picture() -> str:
    """The table as ARCHITECTURE.md shows it: top floor first, one room a line."""
    width = max(len(name) for name in LAYERS) + 2
    lines = [
        f"{name + '/':<{width}} may import {', '.join(allowed) or '(nothing of ours)'}"
        for name, allowed in reversed(LAYERS.items())
    ]
    lines += [f"crossing: {a} -> {b}" for a, b in CROSSINGS]
    return "\n".join(lines)


def test_every_module_stands_in_a_room() -> None:
    loose = [name for name in graph() if name != FACE and room(name) not in LAYERS]
    assert loose == [], "modules in no room of LAYERS: move them into one, or add the room"


def test_the_table_only_points_down() -> None:
    order = list(LAYERS)
    for name, allowed in LAYERS.items():
        for entry in allowed:
            below = entry.split(".")[0]
            assert below in order, (name, entry)
            assert order.index(below) < order.index(name), f"{name} may import {entry}: upward"


def test_no_import_crosses_the_layers() -> None:
    assert violations(graph()) == [], "an import the layer table does not allow (see docstring)"


def test_every_crossing_is_still_there() -> None:
    edges = {
        (module.removeprefix(FACE + "."), target.removeprefix(FACE + "."))
        for module, targets in graph().items()
        for target in targets
    }
    gone = sorted(set(CROSSINGS) - edges)
    assert gone == [], "crossings no longer imported: take them off CROSSINGS"


def test_the_rule_catches_a_planted_violation(tmp_path: Path) -> None:
    # A module planted in the ground floor that imports the exec tool, read as the real ones are.
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def late() -> None:\n    from sprawl_orch.tool.exec_tool import ExecTool  # noqa\n"
    )
    known = modules()
    known_plus = {**known, "sprawl_orch.core.planted": planted}
    ours = graph()
    ours["sprawl_orch.core.planted"] = imports(planted, known_plus)
    assert violations(ours) == ["sprawl_orch.core.planted -> sprawl_orch.tool.exec_tool"]
    # One room down is allowed where the table says so, and a crossing named is let through.
    ours["sprawl_orch.core.planted"] = set()
    ours["sprawl_orch.changes.apply"] = ours["sprawl_orch.changes.apply"] | {
        "sprawl_orch.copy.sync"
    }
    ours["sprawl_orch.container.warm"] = ours["sprawl_orch.container.warm"] | {
        "sprawl_orch.runs.backlog"
    }
    assert violations(ours) == ["sprawl_orch.container.warm -> sprawl_orch.runs.backlog"]


def test_private_modules_stay_in_their_package() -> None:
    assert private_violations(graph()) == [], "a private module imported from outside"


def test_the_privacy_rule_catches_a_planted_violation() -> None:
    ours = graph()
    private = sorted(t for ts in ours.values() for t in ts if t.rpartition(".")[2][:2] == "_p")
    assert "sprawl_orch.engines._podman_attach" in private, "the rule has something to guard"
    ours["sprawl_orch.container.arm"] = ours["sprawl_orch.container.arm"] | {
        "sprawl_orch.engines._podman_attach"
    }
    assert private_violations(ours) == [
        "sprawl_orch.container.arm -> sprawl_orch.engines._podman_attach"
    ]


def test_architecture_doc_shows_the_table() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert picture() in doc, "paste tests/unit/test_layers.py's picture() into ARCHITECTURE.md"
