"""What every subcommand shares: finding the config, saying a refusal, the exit statuses.

Exit statuses, the same for every subcommand (README "Exit status"):

    0        done (exec: the command's own status, 0-255)
    1        image verify: a pinned image is absent; apply: some change was refused
    2        usage error: an unknown option, a missing argument (click's convention)
    124      exec: the window passed and the command was killed (as timeout(1))
    125      sprawl-orch refused or could not start it: an E_... code (as `docker run`)
    128+N    exec: the command died of signal N (137: killed, e.g. halted or out of memory);
             serve: ended by SIGINT (130) or SIGTERM (143) after releasing everything
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sprawl_orch.config import Config, with_warm
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.terminal import safe
from sprawl_orch.runs.results import Refusal

# Re-exported (the `as` says so to mypy): every subcommand imports them from here;
# surface/options.py holds them so that `sprawl-orch image` shares them without the CLI.
from sprawl_orch.surface.options import EXIT_REFUSED as EXIT_REFUSED
from sprawl_orch.surface.options import config_options as config_options
from sprawl_orch.surface.options import find_config as find_config
from sprawl_orch.surface.options import refuse as refuse

EXIT_USAGE = 2
EXIT_WINDOW = 124

F = TypeVar("F", bound=Callable[..., Any])


def server_options(asks: str) -> Callable[[F], F]:
    """--workers and --warm/--no-warm, meaning the same for serve and mcp (`asks`: what a
    client sends them, "requests" or "calls")."""

    def add(func: F) -> F:
        func = click.option(
            "--warm/--no-warm",
            default=None,
            help="Container arm: one kept container per run, an exec per command "
            "(default: [sandbox.container] warm).",
        )(func)
        return click.option(
            "--workers",
            type=click.IntRange(1, 256),
            default=8,
            show_default=True,
            help=f"Execs running at once; more {asks} wait their turn.",
        )(func)

    return add


def server_config(workdir: Path, config_path: Path | None, warm: bool | None) -> Config:
    """A server's config: found as every subcommand finds it, refused (exit 125, on stderr:
    stdout is the protocol's) before anything is served, --warm/--no-warm over the file's."""
    try:
        config = find_config(workdir, config_path)
    except SprawlError as err:
        refuse(err)
    return config if warm is None else with_warm(config, warm)


def say_refusal(refusal: Refusal) -> None:
    # subject and detail may carry a file name or a value a command chose (core/terminal.py)
    click.echo(
        f"sprawl-orch: {refusal.code.value}: {safe(refusal.subject)}: {safe(refusal.detail)}",
        err=True,
    )
    click.echo(f"sprawl-orch: what you can do: {safe(refusal.recovery)}", err=True)
