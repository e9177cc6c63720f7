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
    "exec": "sprawl_orch.cli.exec_cmd:exec_command",
    "apply": "sprawl_orch.cli.apply_cmd:apply_command",
    "view": "sprawl_orch.cli.view_cmd:view_command",
    "serve": "sprawl_orch.cli.serve_cmd:serve_command",
    "mcp": "sprawl_orch.cli.mcp_cmd:mcp_command",
    "image": "sprawl_orch.images.cli:image",
    "doctor": "sprawl_orch.cli.doctor_cmd:doctor_command",
    "copies": "sprawl_orch.cli.copies_cmd:copies_command",
    "workspace": "sprawl_orch.cli.workspace_cmd:workspace_command",
    "server": "sprawl_orch.cli.server_cmd:server_command",
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
    import signal

    # A caller that ignores SIGCHLD makes the kernel reap our children itself: waitpid then
    # fails (ECHILD) and subprocess reports status 0 -- `sh -c 'exit 3'` ended 0, in-process
    # and served alike (servedfaith). The commands we run are ours to reap: it is ours again
    # (and the command starts with it at its default, as most callers' are).
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
