"""`sprawl-orch workspace list|show|discard|take`: a person's view of the agents' workspaces
(orchestrator/changes/workspace.py says what a workspace is). `apply --workspace NAME` brings
one's changes into the working directory; `exec --workspace NAME` runs a command in it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from sprawl_orch.changes.workspace import Workspace, listing
from sprawl_orch.cli.common import config_options, refuse
from sprawl_orch.config import load_config
from sprawl_orch.config.state import state_dir
from sprawl_orch.core.errors import SprawlError


def _workspace(workdir: Path, config_path: Path | None, name: str, as_json: bool) -> Workspace:
    try:
        config = load_config(config_path, cwd=workdir)
        return Workspace(state_dir(config, os.environ), workdir.resolve(), name)
    except SprawlError as err:
        refuse(err, as_json)


@click.group("workspace")
def workspace_command() -> None:
    """The agents' workspaces: list, show, discard, take the person's version of a conflict."""


@workspace_command.command("list")
@config_options
@click.option("--json", "as_json", is_flag=True)
def list_command(workdir: Path, config_path: Path | None, as_json: bool) -> None:
    """Every workspace in the state directory, with its working directory and conflicts."""
    try:
        state = state_dir(load_config(config_path, cwd=workdir), os.environ)
    except SprawlError as err:
        refuse(err, as_json)
    found = listing(state)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("no workspaces")
    for w in found:
        conflicts = w["conflicts"]
        extra = f", conflicts: {', '.join(map(str, conflicts))}" if conflicts else ""  # type: ignore[call-overload]
        click.echo(f"{w['name']}\t{w['workdir']}\t(changed {w['modified']}{extra})")


@workspace_command.command("show")
@config_options
@click.option("--json", "as_json", is_flag=True)
@click.argument("name")
def show_command(workdir: Path, config_path: Path | None, as_json: bool, name: str) -> None:
    """The agent's changes in workspace NAME against the person's tree, and its conflicts."""
    ws = _workspace(workdir, config_path, name, as_json)
    try:
        view = ws.show()
    except SprawlError as err:
        refuse(err, as_json)
    if as_json:
        data = {
            "name": view.name,
            "workdir": view.workdir,
            "path": view.path,
            "changes": [e.model_dump(mode="json") for e in view.changes],
            "conflicts": view.conflicts,
            "running": view.running,
        }
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"workspace {view.name} of {view.workdir} (its tree: {view.path})")
    for e in view.changes:
        click.echo(f"  {e.change:<13} {e.path}")
    for path, theirs in view.conflicts.items():
        click.echo(f"  conflict      {path}: the person's version is kept at {theirs}")
    if view.conflicts:
        click.echo(
            f"apply the agent's version with: sprawl-orch apply --workspace {name} PATH; "
            f"keep the person's with: sprawl-orch workspace take {name} PATH"
        )


@workspace_command.command("discard")
@config_options
@click.argument("name")
def discard_command(workdir: Path, config_path: Path | None, name: str) -> None:
    """Drop workspace NAME and its changes; the next command in it starts afresh."""
    ws = _workspace(workdir, config_path, name, False)
    try:
        ws.discard()
    except SprawlError as err:
        refuse(err, False)
    click.echo(f"sprawl-orch: workspace {name} is discarded", err=True)


@workspace_command.command("take")
@config_options
@click.argument("name")
@click.argument("path")
def take_command(workdir: Path, config_path: Path | None, name: str, path: str) -> None:
    """Take the person's version of conflicting PATH into workspace NAME."""
    ws = _workspace(workdir, config_path, name, False)
    try:
        ws.take(path)
    except SprawlError as err:
        refuse(err, False)
    click.echo(f"sprawl-orch: {path}: the person's version is now in workspace {name}", err=True)
    sys.exit(0)
