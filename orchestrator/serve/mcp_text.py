"""What an agent reads from a `sprawl-orch mcp` tool call: results as plain text.

The MCP tool response carries two things (docs/mcp.md): this text, for the model, and the
full JSON result as structured content, for the harness. The text leads with the outcome and
the exit code, then the confinement statement (never omitted: the agent must know what held),
then stdout and stderr. Streams are already cut at results.OUTPUT_CAP with the path of the
full text on disk ("the way back"), so nothing here cuts again.
"""

from __future__ import annotations

from sprawl_orch.changes.apply import ApplyItem, ApplyResult
from sprawl_orch.core.terminal import safe
from sprawl_orch.runs.results import ExecResult
from sprawl_orch.selection.doctor import DoctorReport


def _stream(name: str, text: str) -> list[str]:
    if not text:
        return [f"{name}: (empty)"]
    return [f"{name}:", text.rstrip("\n")]


def result_text(result: ExecResult) -> str:
    lines: list[str] = []
    if result.outcome == "exceptional":
        said = f"{result.code}: {result.subject}: {result.detail}"
        lines.append(f"refused: {safe(said)}")
        if result.recovery:
            lines.append(f"what you can do: {safe(result.recovery)}")
    elif result.outcome == "backgrounded":
        lines.append(
            f"backgrounded: still running after its window, handle {result.handle}. "
            "`harvest` returns it when it has finished; `halt` with this handle kills it."
        )
    else:
        how = "killed" if result.killed else "finished"
        bg = f" (background command {result.handle})" if result.background else ""
        lines.append(f"settled{bg}: {how}, exit code {result.exit_code}")
        if result.detail:
            lines.append(f"detail: {result.detail}")
    lines.append(f"arm: {result.arm} (where: {result.where}, run: {result.run})")
    if result.confinement is not None:
        lines.append(f"confinement: {safe(result.confinement.statement)}")
    said = result.confinement.statement if result.confinement else ""
    # A settled result's confinement statement already says its limits (runs.results.settled).
    lines += [f"limit: {s}" for s in result.limit_sentences() if s not in said]
    ceiling = result.memory_ceiling
    if ceiling and ceiling.get("state") == "hit":
        lines.append(f"memory ceiling: hit ({ceiling.get('detail', '')})")
    c = result.changes
    if c is not None and (c.total or c.vcs_state):
        lines.append(
            f"changes: {c.total} path(s) in the copy, handle {c.handle}"
            + (f"; {c.protected} PROTECTED (never applied through MCP)" if c.protected else "")
            + (f"; {c.vcs_state} under .git (never applied)" if c.vcs_state else "")
        )
    if result.outcome == "settled":
        lines += _stream("stdout", result.stdout)
        lines += _stream("stderr", result.stderr)
    return "\n".join(lines)


def results_text(results: list[ExecResult], empty: str, left: str | None = None) -> str:
    if not results:
        text = empty
    else:
        text = "\n\n".join(
            f"[{i + 1}/{len(results)}]\n{result_text(r)}" for i, r in enumerate(results)
        )
    return text if left is None else f"{text}\n\ncould not be removed: {left}"


def doctor_text(report: DoctorReport) -> str:
    lines = [f"platform: {report.platform}"]
    for row in report.arms:
        axes = ", ".join(f"{axis} {kept}" for axis, kept in row.assurances.items())
        state = "available" if row.available else "not available"
        lines.append(f"- {row.label}: {state} ({axes})")
        lines += [f"    missing: {m.phrase} — what to do: {m.recovery}" for m in row.missing]
    lines.append(f"auto -> {report.auto.arm}: {report.auto.reason}")
    if report.configured.asked != "auto":
        lines.append(
            f"configured ({report.configured.asked}) -> {report.configured.arm}: "
            f"{report.configured.reason}"
        )
    cg = report.cgroup
    lines.append(f"cgroup: {'delegated' if cg.delegated else 'not delegated'} — {cg.detail}")
    return "\n".join(lines)


def _items(verb: str, items: list[ApplyItem]) -> list[str]:
    return [
        f"{verb}: {i.change} {safe(i.path)}" + (f" ({safe(i.why)})" if i.why else "") for i in items
    ]


def apply_text(result: ApplyResult) -> str:
    head = "dry run: would apply" if result.dry_run else "applied"
    lines = [
        f"{head} {len(result.applied)} change(s) of {result.handle} onto {result.workdir}; "
        f"{len(result.skipped)} skipped, {len(result.refused)} refused"
        + ("; every change of the handle is now applied" if result.finished else "")
    ]
    lines += _items("would apply" if result.dry_run else "applied", result.applied)
    lines += _items("skipped", result.skipped) + _items("refused", result.refused)
    lines += _items("held (protected)", result.held)
    if result.command:
        lines.append(
            "protected paths are never applied through MCP (an agent cannot consent for the "
            f"person); ask the person to review the dry run and run: {result.command}"
        )
    lines += [f"warning: {w}" for w in result.warnings]
    if result.diff:
        lines += ["diff:", result.diff.rstrip("\n")]
    return "\n".join(lines)
