"""`sprawl-orch mcp`: a Model Context Protocol server on stdin/stdout (docs/mcp.md).

stdout belongs to the protocol: nothing else is printed there (config errors go to stderr,
before the server starts). On EOF, SIGTERM or SIGINT every run is released, every copy and
container removed, as `serve` does; exit 0 on EOF, 143/130 on the signals.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import click

from sprawl_orch.cli.common import config_options, server_config, server_options

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


async def _run_bounded(app: MCPServer[Any], limit: int) -> None:
    """The SDK's run_stdio_async with our bounded stdin (mcp_stdio.py): the same low-level
    server and initialization options it uses."""
    from sprawl_orch.serve.mcp_stdio import bounded_stdio

    server = app._lowlevel_server  # what run_stdio_async runs; the SDK names no other way
    async with bounded_stdio(limit) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def _serve_until_signal(app: MCPServer[Any], limit: int) -> int:
    """Run the stdio server; 0 at EOF, 128+N on SIGTERM/SIGINT (taken by the event loop, so a
    signal never lands in the middle of a release)."""
    status = 0
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal status
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    status = 128 + signum
                    group.cancel_scope.cancel()
                    return

        group.start_soon(watch)
        await _run_bounded(app, limit)
        group.cancel_scope.cancel()
    return status


@click.command("mcp")
@config_options
@server_options("calls")
@click.option(
    "--max-request-bytes",
    type=click.IntRange(min=1024),
    default=8 * 1024 * 1024,
    show_default=True,
    help="A message line's bound; a longer one gets E_BAD_REQUEST and is dropped unread.",
)
def mcp_command(
    workdir: Path, config_path: Path | None, workers: int, warm: bool | None, max_request_bytes: int
) -> None:
    """Serve exec, harvest, halt, release, doctor and apply as MCP tools over stdio."""
    from sprawl_orch.serve import mcp_server
    from sprawl_orch.serve import server as serve

    config = server_config(workdir, config_path, warm)
    # No JSON-lines stream: MCP answers through Server.dispatch.
    server = serve.Server(config, workdir, None, workers=workers)
    try:
        status = anyio.run(_serve_until_signal, mcp_server.build(server), max_request_bytes)
    finally:
        # An MCP client gives a server 2 s after closing stdin, then SIGTERM, then SIGKILL
        # (mcp.client.stdio): a second signal must not cut the release short. What a SIGKILL
        # cuts short, the guardian removes.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.close()
    sys.exit(status)
