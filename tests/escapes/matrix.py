"""Verdicts -> the escape matrix (arm x class -> blocked / expected-and-stated / ESCAPED)
and the checks every arm must pass.

Per probe, against what the arm claimed in its result:
  blocked              it did not get out
  expected-and-stated  it got out on an axis the arm does not claim, and the result's
                       statement says so (the axis's unkept phrase is in it)
  open                 it got out on something no axis claims (disk in the copy)
  ESCAPED              it got out on an axis the arm claims -- the test fails
  UNSTATED             it got out on an unclaimed axis the statement does not admit -- fails
  broken               it never ran (e.g. no fork left): it proves nothing -- fails
A class's cell is the worst of its probes, with counts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sprawl_orch.core.assurances import Kept, phrase
from tests.escapes.probe import Verdict
from tests.escapes.runner import ArmRun

ORDER = ("broken", "ESCAPED", "UNSTATED", "open", "expected-and-stated", "blocked", "n/a")


def outcome(v: Verdict, run: ArmRun) -> str:
    if v.status != "escaped":
        return v.status
    axis = v.probe.axis
    if axis is None:
        return "open"
    if run.claimed.kept(axis):
        return "ESCAPED"
    return "expected-and-stated" if phrase(axis, Kept.NO) in run.statement else "UNSTATED"


def classes(verdicts: list[Verdict]) -> list[str]:
    return list(dict.fromkeys(v.probe.cls for v in verdicts))


def cell(verdicts: list[Verdict], run: ArmRun, cls: str) -> str:
    """Every outcome of the class's probes with its count, worst first."""
    got = Counter(outcome(v, run) for v in verdicts if v.probe.cls == cls)
    counted = [(k, got[k]) for k in ORDER if k != "n/a" and got[k]]
    return ", ".join(f"{k} {n}" for k, n in counted) if counted else "n/a"


def table(rows: list[tuple[ArmRun, list[Verdict]]]) -> str:
    if not rows:
        return ""
    cols = classes(rows[0][1])
    head = "| arm | probes | " + " | ".join(cols) + " |"
    sep = "|" + "---|" * (len(cols) + 2)
    lines = [head, sep]
    for run, verdicts in rows:
        n = sum(1 for v in verdicts if v.status != "n/a")
        cells = [cell(verdicts, run, c) for c in cols]
        lines.append(f"| {run.arm} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def details(run: ArmRun, verdicts: list[Verdict]) -> str:
    lines = [f"## {run.arm}", f"statement: {run.statement}", ""]
    for v in verdicts:
        axis = v.probe.axis.value if v.probe.axis else "-"
        lines.append(f"- {v.probe.id} [{axis}] {outcome(v, run)}: {v.evidence[:160]}")
    return "\n".join(lines)


def write(path: Path, rows: list[tuple[ArmRun, list[Verdict]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ["# Escape matrix", "", table(rows), ""]
    text += [details(r, v) + "\n" for r, v in rows]
    path.write_text("\n".join(text))


def failures(run: ArmRun, verdicts: list[Verdict]) -> list[str]:
    return [
        f"{v.probe.id} [{v.probe.axis}] {outcome(v, run)}: {v.evidence}"
        for v in verdicts
        if outcome(v, run) in ("ESCAPED", "UNSTATED", "broken")
    ]
