"""`sprawl-orch exec`: run one command confined and mirror its exit status, like `docker run`.

Options end at the first argument that is not one of ours: `exec ls --help` runs
`ls --help`, `exec grep -C 1 x f` runs grep with its own -C (as `docker run`, `env` and
`sudo` parse). Without --json the command's stdout and stderr are copied live and
byte for byte; the confinement statement follows on stderr at the end. With --json the
result object (results.py: the cap and its way back) is printed instead.

Exit status: see cli/common.py (the command's own; 124 window; 125 refused; 128+N signal).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from sprawl_orch.changes.changes import Changes
from sprawl_orch.cli.common import (
    EXIT_REFUSED,
    EXIT_WINDOW,
    config_options,
    find_config,
    say_refusal,
)
from sprawl_orch.core.arg_bounds import check_window
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.terminal import json_safe, safe
from sprawl_orch.runs.results import ExecResult, Refusal, exceptional


class Seconds(click.ParamType[float]):
    """A window in seconds, by the library's one rule (core/arg_bounds.check_window): finite,
    above 0, at most MAX_WINDOW_S. FloatRange(min=0, min_open=True) let `nan` through (the
    command ran with no window) and `inf` / `1e400` (E_INTERNAL) -- atkaction."""

    name = "seconds"

    def convert(
        self, value: float | str, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
            check_window(seconds)
        except ValueError:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        except SprawlError as refused:
            self.fail(refused.detail, param, ctx)
        return seconds


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
    counts = ", ".join(
        f"{n} {k.replace('_', ' ')}"
        for k, n in (
            ("created", c.created),
            ("modified", c.modified),
            ("deleted", c.deleted),
            ("kind_changed", c.kind_changed),
            ("mode_changed", c.mode_changed),
        )
        if n
    )
    line = f"the command changed {c.total} path(s) in its copy ({counts})"
    if c.protected:
        line += (
            f"; {c.protected} of them PROTECTED (they would make this machine run something: "
            "held by apply until you name them)"
        )
    if c.vcs_state:
        line += f"; and {c.vcs_state} under .git (repository state: never applied)"
    if c.kept:
        return (
            f"{line}; review: sprawl-orch apply --dry-run {c.handle}; keep: "
            f"sprawl-orch apply {c.handle}"
        )
    return safe(f"{line}; {c.note}" if c.note else line)


def _say(result: ExecResult) -> None:
    if result.outcome == "exceptional":
        assert result.code is not None  # every exceptional result carries its code
        say_refusal(
            Refusal(
                code=result.code,
                subject=result.subject or "",
                detail=result.detail or "",
                recovery=result.recovery or "",
            )
        )
        return
    for line in result.statement.splitlines():
        click.echo(f"sprawl-orch: {safe(line)}", err=True)
    for entry in (result.network or {}).get("egress", []):
        if not entry["allowed"]:
            said = f"{entry['kind']} {entry['host']}:{entry['port']}: {entry['reason']}"
            click.echo(f"sprawl-orch: egress refused: {safe(said)}", err=True)
    if result.work is not None and result.work.excluded:
        left_out = safe(", ".join(result.work.excluded))
        click.echo(
            f"sprawl-orch: left out of the copy ([sandbox.copy] exclude): {left_out}", err=True
        )
    if result.work is not None:
        for left in result.work.refused_links:
            click.echo(
                f"sprawl-orch: left out of the copy (a link out of the tree): {safe(left)}",
                err=True,
            )
        for left in result.work.skipped:
            click.echo(f"sprawl-orch: not in the copy: {safe(left)}", err=True)
    if result.changes is not None and result.changes.total:
        click.echo(f"sprawl-orch: {changes_line(result.changes)}", err=True)
    elif result.changes is not None and result.changes.note:
        # A workspace's note says what a person must know with no change too: made afresh
        # (its state may have been deleted), held back, conflicts.
        click.echo(f"sprawl-orch: no changes; {safe(result.changes.note)}", err=True)


@click.command("exec", context_settings={"allow_interspersed_args": False})
@config_options
@click.option("--shell", is_flag=True, help="Run ARGV as one shell line.")
@click.option(
    "--where",
    type=click.Choice(["sandbox", "host"]),
    default="sandbox",
    show_default=True,
    help="host runs in place with no guarantees; ask by name.",
)
@click.option(
    "--timeout",
    type=Seconds(),
    default=None,
    help="Window in seconds; past it the command is killed.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the result object as JSON (output capped, with its way back).",
)
@click.option("--schema", is_flag=True, help="Print the JSON schema of the result and exit.")
@click.option(
    "--workspace",
    default=None,
    metavar="NAME",
    help="Run in workspace NAME: the agent's changes last across commands until applied "
    "(apply --workspace NAME) or discarded; the person's edits flow in before each.",
)
@click.option(
    "-i",
    "--interactive",
    is_flag=True,
    help="Pass stdin to the command (without it the command reads /dev/null).",
)
@click.option(
    "-t",
    "--tty",
    is_flag=True,
    help="Give the command a new terminal (never yours), of your window's size.",
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def exec_command(
    workdir: Path,
    config_path: Path | None,
    shell: bool,
    where: str,
    timeout: float | None,
    as_json: bool,
    schema: bool,
    workspace: str | None,
    interactive: bool,
    tty: bool,
    argv: tuple[str, ...],
) -> None:
    """Run ARGV confined, in a synced copy of the working directory."""
    if schema:
        click.echo(json.dumps(result_schema(), indent=2))
        return
    if not argv:
        raise click.UsageError("give the program to run (and its arguments)")
    command = list(argv)
    if shell:
        command = [" ".join(argv)] if len(argv) > 1 else command
    if workspace is not None and not workdir.is_dir():
        # A workspace's working directory moved or deleted (issue 23's bad input): a coded
        # refusal naming it, not click's bare usage error; the workspace stays as it was.
        gone = SprawlError(
            ErrorCode.STORAGE_FATAL,
            str(workdir),
            f"the working directory of workspace {workspace!r} is missing or not a directory "
            "(moved or deleted); the workspace is kept in the state directory as it was",
            "restore the directory (or move it back) and run again; `sprawl-orch workspace "
            "list` shows the workspaces and their directories",
        )
        _finish(
            exceptional("unavailable", gone, command=command, shell=shell, where=where), as_json
        )
        return
    closed = [name for name, stream in _needed(interactive) if stream is None]
    if closed:
        # A caller that closed a standard stream (`>&-`, `<&-` under -i) crashed here with an
        # AttributeError traceback (servedfaith, 2026-12-03): say so with a code instead.
        shut = SprawlError(
            ErrorCode.BAD_REQUEST,
            " and ".join(closed),
            f"the caller's {' and '.join(closed)} is closed: the command's "
            f"{'input' if closed == ['stdin'] else 'output'} has nowhere to go",
            "give sprawl-orch the stream (e.g. `>/dev/null`, or `</dev/null` without -i)",
        )
        _finish(
            exceptional("unavailable", shut, command=command, shell=shell, where=where), as_json
        )
    try:
        config = find_config(workdir, config_path)
    except SprawlError as err:
        refused = exceptional("unavailable", err, command=command, shell=shell, where=where)
        _finish(refused, as_json)
        return
    from sprawl_orch.tool.exec_tool import ExecTool

    follow = None if as_json else (sys.stdout.buffer, sys.stderr.buffer)
    sys.stdout.flush()
    # One call per process: the state directory's shared guardian, not one of our own.
    from sprawl_orch.cli.copy_progress import copy_progress
    from sprawl_orch.cli.exec_input import caller_terminal, command_input

    given = command_input(interactive, tty)
    try:
        with (
            caller_terminal(given, interactive),
            copy_progress(as_json or tty) as progress,
            ExecTool(config, workdir, shared_guardian=True, progress=progress) as tool,
        ):
            result = tool.exec(
                command,
                shell=shell,
                where=where,  # type: ignore[arg-type]
                # the CLI kills at its --timeout: a process that exits keeps no backlog
                window=timeout,
                background_ok=False,
                follow=follow,
                workspace=workspace,
                given=given,
            )
    except SprawlError as err:  # the tool refused its place (a state directory in the tree)
        result = exceptional("unavailable", err, command=command, shell=shell, where=where)
    _finish(result, as_json)


def _finish(result: ExecResult, as_json: bool) -> None:
    if as_json:
        click.echo(json_safe(json.dumps(result.as_json_dict(), indent=2)))
    else:
        _say(result)
    sys.exit(exit_status(result))


def result_schema() -> dict[str, object]:
    """The one result schema: `exec --json`, serve's `result`, the ledger's lines and the
    Python API's ExecResult all have exactly these keys."""
    return ExecResult.model_json_schema()


def _needed(interactive: bool) -> list[tuple[str, object]]:
    """The standard streams this call writes or reads (stdin only under -i)."""
    streams: list[tuple[str, object]] = [("stdout", sys.stdout)]
    if interactive:
        streams.append(("stdin", sys.stdin))
    return streams
