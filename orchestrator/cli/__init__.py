"""The `sprawl-orch` command: a thin click layer over the library.

Subcommands are imported only when invoked (click's documented lazy-group
pattern), so `sprawl-orch exec` doesn't pay for the docker SDK, rich tables or
the image builders it doesn't use.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

# name -> "module:attribute". One line per command; add yours here.
COMMANDS: dict[str, str] = {
    "exec": "orchestrator.cli.exec_cmd:exec_command",
    "apply": "orchestrator.cli.apply_cmd:apply_command",
    "view": "orchestrator.cli.view_cmd:view_command",
    "serve": "orchestrator.cli.serve_cmd:serve_command",
    "mcp": "orchestrator.cli.mcp_cmd:mcp_command",
    "image": "images.cli:image",
    "doctor": "orchestrator.cli.doctor_cmd:doctor_command",
    "copies": "orchestrator.cli.copies_cmd:copies_command",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        command: Any = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup)
@click.version_option(package_name="sprawl-orch")
def main() -> None:
    """Run an AI agent's commands confined, and say which guarantees held."""
