"""`sprawl-orch serve`: JSON lines on stdin/stdout for harnesses in any language (docs/serve.md).

Exit status (cli/common.py): 0 when stdin closed and everything was released; 2 for bad
options; 125 for a config refused; 143 on SIGTERM and 130 on SIGINT, after releasing
everything.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType

import click

from sprawl_orch.cli.common import config_options, server_config, server_options


class _Stop(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def _stop_on(signum: int, frame: FrameType | None) -> None:
    raise _Stop(128 + signum)


@click.command("serve")
@config_options
@server_options("requests")
@click.option(
    "--shares",
    type=click.Choice(["unset", "cpu", "cpu_and_memory"]),
    default="unset",
    show_default=True,
    help="Per-run cgroup: equal CPU shares, and a memory ceiling with cpu_and_memory.",
)
@click.option(
    "--run-memory-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Each run's memory ceiling (with --shares cpu_and_memory).",
)
@click.option(
    "--cgroup-root",
    type=click.Path(path_type=Path),
    default=None,
    help="Where cgroupfs is mounted (default /sys/fs/cgroup).",
)
@click.option(
    "--max-request-bytes",
    type=click.IntRange(min=1024),
    default=8 * 1024 * 1024,
    show_default=True,
    help="A request line's bound; a longer one gets E_BAD_REQUEST and is dropped unread.",
)
@click.option("--schema", is_flag=True, help="Print the JSON schema of requests and responses.")
def serve_command(
    workdir: Path,
    config_path: Path | None,
    workers: int,
    shares: str,
    run_memory_bytes: int | None,
    cgroup_root: Path | None,
    warm: bool | None,
    max_request_bytes: int,
    schema: bool,
) -> None:
    """Serve exec, harvest, halt, release, processes and doctor as JSON lines."""
    from sprawl_orch.runs.cgroups import delegation
    from sprawl_orch.runs.shares import Shares
    from sprawl_orch.serve import server as serve
    from sprawl_orch.serve import wire

    if schema:
        click.echo(json.dumps(wire.schema(), indent=2))
        return
    if (shares == "cpu_and_memory") != (run_memory_bytes is not None):
        raise click.UsageError("--run-memory-bytes goes with --shares cpu_and_memory, and only")
    config = server_config(workdir, config_path, warm)
    asked = Shares.cpu_and_memory(run_memory_bytes) if run_memory_bytes else Shares(kind=shares)  # type: ignore[arg-type]
    found = delegation(cgroup_root) if cgroup_root is not None else None
    server = serve.Server(config, workdir, sys.stdout, shares=asked, workers=workers, found=found)
    signal.signal(signal.SIGTERM, _stop_on)
    signal.signal(signal.SIGINT, _stop_on)
    try:
        lines = wire.bounded_lines(sys.stdin.buffer, max_request_bytes)
        server.serve(lines, max_request_bytes)
    except _Stop as stop:
        server.close()
        sys.exit(stop.status)
