"""The `sprawl-orch` program: `exec` through the thin client (exec_client.py), every other
subcommand through the click CLI in-process."""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["exec"] and not {"--help", "--schema"} & set(args[1:2]):
        from sprawl_orch.client.exec_client import run

        run(args[1:])
    from sprawl_orch.cli import main as cli

    cli(prog_name="sprawl-orch")
