"""`sprawl-orch doctor`: what this machine offers, one row per arm, and what `auto` picks.

Reads the same `Offerings` as exec, except that every engine is admitted (exec stops at
the first admitted one): admission starts a probe container per engine, so doctor takes
a few seconds when engines are present.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import click

from sprawl_orch.cli.common import config_options, find_config, refuse
from sprawl_orch.core.errors import SprawlError


def _render(report: object) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from sprawl_orch.selection.doctor import DoctorReport

    assert isinstance(report, DoctorReport)
    console = Console()
    table = Table(
        title=f"sprawl-orch doctor — {report.platform}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("arm", no_wrap=True)
    table.add_column("ok", no_wrap=True)
    for axis in ("filesystem", "network", "process_tree", "user", "resources"):
        table.add_column(axis, no_wrap=True)
    for row in report.arms:
        mark = "[green]yes[/]" if row.available else "[red]no[/]"
        axes = [f"[green]{v}[/]" if v == "yes" else f"[dim]{v}[/]" for v in row.assurances.values()]
        table.add_row(escape(row.label), mark, *axes)
    console.print(table)
    for row in report.arms:
        if row.available:
            console.print(f"[bold]{escape(row.label)}[/]: {escape(row.detail or 'available')}")
        for m in row.missing:
            console.print(f"[bold]{escape(row.label)}[/]: [red]{escape(m.phrase)}[/]")
            console.print(f"    what to do: {escape(m.recovery)}")
        if row.egress:
            console.print(f"    network: {escape(row.egress)}")
    console.print()
    console.print(f"[bold]auto[/] → {report.auto.arm}: {escape(report.auto.reason)}")
    if report.configured.asked != "auto":
        console.print(
            f"[bold]configured[/] ([sandbox] arm = {report.configured.asked!r}) → "
            f"{report.configured.arm}: {escape(report.configured.reason)}"
        )
    console.print(f"[bold]scratch[/]: {escape(str(report.scratch or report.scratch_problem))}")
    for name, sh in (("shell", report.shell), ("pwsh", report.pwsh)):
        said = (
            f"{sh.program} (interpreter {sh.interpreter})"
            if sh.state == "found"
            else f"{sh.state}: {sh.detail}"
        )
        console.print(f"[bold]{name}[/] ({sh.asked}): {escape(said)}")
    cg = report.cgroup
    state = "delegated" if cg.delegated else "not delegated"
    console.print(f"[bold]cgroup[/]: {state} — {escape(cg.detail)}")
    console.print(f"[bold]yielding[/]: {escape(report.yielding)}")
    if report.podman_pause:
        console.print(f"[bold]podman[/]: {escape(report.podman_pause)}")


@click.command("doctor")
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor_command(workdir: Path, config_path: Path | None, as_json: bool) -> None:
    """Show every arm this machine offers, its five guarantees, and what auto picks."""
    from sprawl_orch.container.offer import offer_engines
    from sprawl_orch.runs.cgroups import delegation
    from sprawl_orch.selection.doctor import doctor_report
    from sprawl_orch.selection.offerings import Offerings

    try:
        config = find_config(workdir, config_path)
    except SprawlError as err:
        refuse(err, as_json)
    offerings = Offerings.this_machine(config, with_engines=False)
    offerings = dataclasses.replace(offerings, engines=offer_engines(config, every=True))
    report = doctor_report(offerings, config, delegation(), os.environ)
    if as_json:
        click.echo(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        _render(report)
