"""`sprawl-orch exec`: run one command confined and mirror its exit status.

Exit status: the command's own; 128+N when a signal ended it; 124 when the
window passed and it was killed (as timeout(1)); 125 when sprawl-orch refused
or could not start it (as `docker run`), with the code, detail and recovery on
stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from orchestrator.changes import Changes
from orchestrator.config import load_config
from orchestrator.errors import SprawlError
from orchestrator.results import ExecResult

EXIT_REFUSED = 125
EXIT_WINDOW = 124


def exit_status(result: ExecResult) -> int:
    if result.outcome == "exceptional":
        return EXIT_REFUSED
    if result.killed and result.detail:
        return EXIT_WINDOW
    code = result.exit_code
    if code is None:
        return EXIT_REFUSED
    return 128 - code if code < 0 else code


def changes_line(c: Changes) -> str:
    counts = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in (
        ("created", c.created), ("modified", c.modified), ("deleted", c.deleted),
        ("kind_changed", c.kind_changed), ("mode_changed", c.mode_changed)) if n)
    line = f"the command changed {c.total} path(s) in its copy ({counts})"
    if c.kept:
        return f"{line}; review: sprawl-orch apply --dry-run {c.handle}; keep: " \
               f"sprawl-orch apply {c.handle}"
    return f"{line}; {c.note}" if c.note else line


def print_refusal(err: SprawlError | ExecResult) -> None:
    if isinstance(err, SprawlError):
        code, subject, detail, recovery = err.code.value, err.subject, err.detail, err.recovery
    else:
        code, subject = err.what or "", err.subject or ""
        detail, recovery = err.detail or "", err.recovery or ""
    click.echo(f"sprawl-orch: {code}: {subject}: {detail}", err=True)
    click.echo(f"sprawl-orch: what you can do: {recovery}", err=True)


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("-C", "workdir", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="Working directory whose copy the command runs in (default: .).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Config file (default: sprawl.toml in the working directory).")
@click.option("--shell", is_flag=True, help="Run ARGV as one shell line.")
@click.option("--where", type=click.Choice(["sandbox", "host"]), default="sandbox",
              show_default=True, help="host runs in place with no guarantees; ask by name.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Window in seconds; past it the command is killed.")
@click.option("--json", "as_json", is_flag=True, help="Print the result object as JSON.")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_command(
    workdir: Path, config_path: Path | None, shell: bool, where: str, timeout: float | None,
    as_json: bool, argv: tuple[str, ...],
) -> None:
    """Run ARGV confined, in a synced copy of the working directory."""
    from orchestrator.exec_tool import ExecTool

    try:
        if not workdir.is_dir():
            raise click.BadParameter(f"{workdir} is not a directory", param_hint="-C")
        config = load_config(config_path, cwd=workdir)
    except SprawlError as err:
        if as_json:
            click.echo(json.dumps({"outcome": "exceptional", **err.as_dict()}))
        else:
            print_refusal(err)
        sys.exit(EXIT_REFUSED)
    with ExecTool(config, workdir) as tool:
        result = tool.exec(list(argv), shell=shell, where=where,  # type: ignore[arg-type]
                           timeout=timeout, background_ok=False)
    if as_json:
        click.echo(json.dumps(result.as_json_dict(), indent=2))
    elif result.outcome == "exceptional":
        print_refusal(result)
    else:
        sys.stdout.write(result.stdout)
        sys.stdout.flush()
        sys.stderr.write(result.stderr)
        if result.confinement:
            click.echo(f"sprawl-orch: {result.confinement.statement}", err=True)
        if result.detail:
            click.echo(f"sprawl-orch: {result.detail}", err=True)
        if result.changes is not None and result.changes.total:
            click.echo(f"sprawl-orch: {changes_line(result.changes)}", err=True)
    sys.exit(exit_status(result))
