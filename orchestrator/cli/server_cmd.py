"""`sprawl-orch server status|stop`: the per-user exec servers (cli/exec_server.py) of this
user's runtime directory -- every version's, each with its socket, pid and whether it answers."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from sprawl_orch.core.exec_place import Refused, runtime_dir


def _servers() -> list[tuple[Path, int | None]]:
    try:
        place = runtime_dir(dict(os.environ))
    except Refused as err:
        raise click.ClickException(str(err)) from err
    found = []
    for sock in sorted(place.glob("exec-*.sock")):
        try:
            text = Path(f"{sock}.lock").read_text().strip()
        except OSError:  # no lock file: a socket left by a killed server
            text = ""
        found.append((sock, int(text) if text.isdigit() else None))
    return found


def _ours(pid: int, sock: Path) -> bool:
    """`pid` is still that server: our uid, and its command line names the socket (a pid
    reused since would be someone else's process)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:  # the process is gone
        return False
    return uid == os.getuid() and str(sock).encode() in cmdline


@click.group("server")
def server_command() -> None:
    """The per-user exec server behind `sprawl-orch exec` (started by the first call; it
    leaves after 5 idle minutes)."""


@server_command.command("status")
def status() -> None:
    """List this user's exec servers."""
    servers = _servers()
    if not servers:
        click.echo("no exec server")
    for sock, pid in servers:
        alive = pid is not None and _ours(pid, sock)
        click.echo(f"{sock}  pid {pid if alive else '-'}  {'running' if alive else 'gone'}")


@server_command.command("stop")
def stop() -> None:
    """Stop every exec server of this user; calls running now finish first."""
    for sock, pid in _servers():
        if pid is not None and _ours(pid, sock):
            os.kill(pid, signal.SIGTERM)
            click.echo(f"stopped {sock} (pid {pid})")
