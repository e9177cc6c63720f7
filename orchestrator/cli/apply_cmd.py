"""`sprawl-orch apply HANDLE [PATH...]` / `apply --workspace NAME [PATH...]`: bring kept
changes of a finished command, or a workspace's, into the working directory
(orchestrator/changes/apply.py says what makes it safe).

``--dry-run`` prints the unified diff (text) or a one-line summary (binary) of what would be
applied and writes nothing; protected paths come first, under a banner, then new executables.
A protected path (orchestrator/core/protected.py) is applied only when named with ``--protected
PATH`` (repeatable; a file, or a directory for everything beneath it; never `.git`).
``--drop`` forgets the handle's kept changes without applying.
Exit status: 0 when nothing chosen was refused, 1 when something was (each refusal is named on
stderr with its reason and, for a conflict, both stamps as people read them), 125 when the
handle or the directory is wrong.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sprawl_orch.cli.common import refuse
from sprawl_orch.config import load_config
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.terminal import json_safe, safe

if TYPE_CHECKING:
    from sprawl_orch.changes.apply import ApplyResult

EXIT_SOME_REFUSED = 1


@click.command("apply")
@click.option(
    "-C",
    "workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Working directory the changes must belong to (default: the one they were made from).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Config file (default: sprawl.toml in the working directory).",
)
@click.option("--dry-run", is_flag=True, help="Print the diff of what would be applied.")
@click.option("--drop", is_flag=True, help="Forget the handle's kept changes, apply nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the apply result as JSON.")
@click.option(
    "--workspace",
    default=None,
    metavar="NAME",
    help="Apply workspace NAME's changes instead of a command's (then no HANDLE: PATHs only).",
)
@click.option(
    "--protected",
    "protected",
    multiple=True,
    metavar="PATH",
    help="Apply this protected path too (a file, or a directory: everything beneath it; "
    "repeatable; never a glob, never .git). Without it protected paths are held.",
)
@click.argument("handle", required=False)
@click.argument("paths", nargs=-1)
def apply_command(
    workdir: Path | None,
    config_path: Path | None,
    dry_run: bool,
    drop: bool,
    as_json: bool,
    workspace: str | None,
    protected: tuple[str, ...],
    handle: str | None,
    paths: tuple[str, ...],
) -> None:
    """Apply the changes of HANDLE (all, or the PATHs named and what is beneath them)."""
    import os

    from sprawl_orch.changes.apply import apply
    from sprawl_orch.changes.store import drop_handle
    from sprawl_orch.config.state import state_dir

    if workspace is None and handle is None:
        raise click.UsageError("give the HANDLE of a command's changes, or --workspace NAME")
    try:
        config = load_config(config_path, cwd=workdir or Path("."))
        state = state_dir(config, os.environ)
        if workspace is not None:
            from sprawl_orch.changes.workspace import Workspace

            chosen = [handle, *paths] if handle is not None else list(paths)
            ws = Workspace(state, (workdir or Path(".")).resolve(), workspace)
            result = ws.apply(
                chosen or None,
                dry_run=dry_run,
                protected=protected,
                protected_globs=config.apply.protected,
                unprotect=config.apply.unprotect,
            )
            _report(result, dry_run, as_json)
        assert handle is not None
        if drop:
            drop_handle(state, handle)
            click.echo(f"sprawl-orch: the kept changes of {safe(handle)} are dropped", err=True)
            sys.exit(0)
        result = apply(
            state,
            handle,
            list(paths) or None,
            dry_run=dry_run,
            workdir=workdir,
            protected=protected,
            protected_globs=config.apply.protected,
            unprotect=config.apply.unprotect,
            config_path=config.source,
        )
    except SprawlError as err:
        refuse(err, as_json)
    _report(result, dry_run, as_json)


def _report(result: ApplyResult, dry_run: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json_safe(json.dumps(result.as_json_dict(), indent=2)))
    else:
        _say(result, dry_run)
    sys.exit(EXIT_SOME_REFUSED if result.refused else 0)


def _say(result: ApplyResult, dry_run: bool) -> None:
    """The human lines; every name and reason through terminal.safe (a file name may carry
    escape sequences). The diff is made safe where it is made (apply_diff.py)."""
    if result.diff:
        sys.stdout.write(result.diff)
    verb = "would apply" if dry_run else "applied"
    for warning in result.warnings:
        click.echo(f"sprawl-orch: warning: {safe(warning)}", err=True)
    for item in result.applied:
        mark = " (protected, named)" if item.protected else ""
        mark += " (new executable)" if item.executable else ""
        click.echo(f"sprawl-orch: {verb} {item.change} {safe(item.path)}{mark}", err=True)
    for item in result.held:
        click.echo(f"sprawl-orch: held {safe(item.path)}: {safe(item.why or '')}", err=True)
    if result.command:
        click.echo(f"sprawl-orch: to apply what was held, run: {result.command}", err=True)
    for item in result.refused:
        stamps = ""
        if item.at_sync or item.now:
            stamps = (
                f"\n    when the command's copy was made: {readable_stamp(item.at_sync)}"
                f"\n    in the working directory now:     {readable_stamp(item.now)}"
                "\n    to merge by hand: apply --dry-run shows the command's diff; to keep "
                "the command's version, apply again after moving yours aside"
            )
        click.echo(
            f"sprawl-orch: refused {safe(item.path)}: {safe(item.why or '')}{stamps}", err=True
        )
    if result.skipped:
        click.echo(
            f"sprawl-orch: skipped {len(result.skipped)} path(s) not chosen or applied before",
            err=True,
        )
    if result.finished:
        click.echo(
            f"sprawl-orch: every change of {safe(result.handle)} is applied; its kept copy is "
            "removed",
            err=True,
        )


def readable_stamp(stamp: dict[str, int] | None) -> str:
    """A stamp as people read it: when it was modified (local time), size and permissions."""
    if not stamp:
        return "absent"
    import stat as st
    import time

    seconds, ns = divmod(stamp.get("mtime_ns", 0), 1_000_000_000)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
    zone = time.strftime("%z", time.localtime(seconds))
    mode = stamp.get("mode", 0)
    return (
        f"modified {when}.{ns // 1_000_000:03d} {zone}, {stamp.get('size', 0):,} bytes, "
        f"{st.filemode(mode) if st.S_IFMT(mode) else f'{st.S_IMODE(mode):04o}'}"
    )
