"""-C/--config on every subcommand, the config they find, and the refusal said on exit 125."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from sprawl_orch.config import Config, load_config
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.terminal import json_safe, safe

EXIT_REFUSED = 125

F = TypeVar("F", bound=Callable[..., Any])


def config_options(func: F) -> F:
    """-C DIR and --config FILE, on every subcommand, meaning the same thing everywhere."""
    func = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Config file (default: sprawl.toml in the -C directory, if present).",
    )(func)
    return click.option(
        "-C",
        "workdir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("."),
        help="Working directory: commands run in its copy; its sprawl.toml is read (default: .).",
    )(func)


def find_config(workdir: Path, config_path: Path | None) -> Config:
    """`--config FILE` if given, else `sprawl.toml` in `-C DIR`, else every default."""
    if not workdir.is_dir():
        raise click.BadParameter(f"{workdir} is not a directory", param_hint="'-C'")
    return load_config(config_path, cwd=workdir)


def refuse(err: SprawlError, as_json: bool = False) -> NoReturn:
    """Say the refusal and exit 125: its four keys as JSON on stdout with --json (the shape
    of runs/results.py's Refusal.as_result), else on stderr."""
    if as_json:
        click.echo(json_safe(json.dumps({"outcome": "exceptional", **err.as_dict()})))
    else:
        # subject and detail may carry a file name or a value a command chose (issue 22)
        said = f"{err.code.value}: {err.subject}: {err.detail}"
        click.echo(f"sprawl-orch: {safe(said)}", err=True)
        click.echo(f"sprawl-orch: what you can do: {safe(err.recovery)}", err=True)
    sys.exit(EXIT_REFUSED)
