"""`.ci/cost`'s budgets (README: What a CI run costs): a part over its budget is warned about,
the budgets with set-up fit the whole run's 45 minutes, and the README shows the same numbers."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _cost() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("ci_cost", str(ROOT / ".ci" / "cost"))
    spec = importlib.util.spec_from_loader("ci_cost", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_budgets_fit_the_whole_run() -> None:
    cost = _cost()
    assert sum(cost.BUDGETS.values()) + cost.SETUP <= cost.WHOLE


def test_a_part_over_its_budget_is_warned_about_not_failed(tmp_path: Path) -> None:
    xml = tmp_path / "run.xml"
    xml.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.unit.test_a" name="test_x" time="200"/>'
        '<testcase classname="tests.integration.test_b" name="test_y[docker]" time="60"/>'
        '<testcase classname="tests.secrets.test_c" name="test_z" time="50"/>'
        '<testcase classname="tests.egress.test_d" name="test_w" time="20"/>'
        "</testsuite></testsuites>"
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "cost"), str(xml)],
        capture_output=True,
        text=True,
        check=True,
    )
    warned = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    # unit: 3.3 min > 2.5; other: secrets + egress together 1.2 min > 1; docker's 1 min is within
    assert [w.split(" took")[0] for w in warned] == ["warning: other", "warning: unit"]
    assert "integration, docker" in done.stdout


def test_the_readme_shows_each_budget() -> None:
    cost = _cost()
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### What a CI run costs", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 3:
            rows[cells[0]] = cells[3]
    for name, budget in cost.BUDGETS.items():
        shown = next((v for k, v in rows.items() if k.startswith(name)), None)
        assert shown == f"{budget:.1f}", name
    assert rows["set-up, install, lint, types"] == f"{cost.SETUP:.1f}"
    assert rows["whole run"] == f"{sum(cost.BUDGETS.values()) + cost.SETUP:.1f}"
