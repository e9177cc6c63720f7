"""`sprawl-orch view --shells`: shell-arm calls and failure classes per interpreter.

Reads the ledger and folds every result with `ShellTally` (seed D30). The table is
for people; `--json` prints one JSON object per interpreter, one per line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from sprawl_orch.cli.common import config_options, find_config, refuse
from sprawl_orch.config.state import ledger_path
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.terminal import json_safe
from sprawl_orch.runs.ledger import Ledger
from sprawl_orch.runs.outcome import FailureClass, ShellTally

CAPTION = (
    "share failed = classified failures / calls. Classes come from exit codes, error ids "
    "and English messages: cmd's syntax errors on a non-English Windows fall into "
    '"unclassified" (its messages follow the display language).'
)


@click.command("view")
@click.option("--shells", is_flag=True, help="Calls and failure classes per interpreter.")
@click.option(
    "--ledger",
    "ledger_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Ledger file to read (default: [state] ledger, else <state dir>/ledger.jsonl).",
)
@config_options
@click.option("--json", "as_json", is_flag=True, help="One JSON line per interpreter.")
def view_command(
    shells: bool,
    ledger_file: Path | None,
    workdir: Path,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Read the ledger back in one of its views ([state] from the config found as exec does)."""
    if not shells:
        raise click.UsageError("choose a view: --shells")
    try:
        if ledger_file is None:
            ledger_file = ledger_path(find_config(workdir, config_path), os.environ)
        ledger = Ledger(ledger_file)
        tally = ShellTally().absorb_all(ledger.read())
    except SprawlError as err:
        refuse(err, as_json)
    if as_json:
        for row in tally.sorted_rows():
            click.echo(json_safe(json.dumps(row.as_dict(), ensure_ascii=False)))
    else:
        _table(tally, ledger_file)
    if ledger.skipped:
        click.echo(
            f"{ledger.skipped} torn or invalid line(s) in {ledger_file} were skipped", err=True
        )


def _table(tally: ShellTally, source: Path) -> None:
    # rich is imported here, not at module import: `exec` never pays for it.
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Shell-arm calls in {source}", caption=CAPTION)
    table.add_column("interpreter")
    table.add_column("calls", justify="right")
    for cls in FailureClass:
        table.add_column(cls.value, justify="right")
    table.add_column("share failed", justify="right")
    for row in tally.sorted_rows():
        table.add_row(
            row.interpreter,
            str(row.calls),
            *(str(row.failures[cls]) for cls in FailureClass),
            f"{row.share_failed:.1%}",
        )
    Console().print(table)
