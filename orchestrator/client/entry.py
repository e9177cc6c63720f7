"""The `sprawl-orch` program: `exec` through the thin client (exec_client.py), every other
subcommand through the click CLI in-process."""

from __future__ import annotations

import os
import sys


def _fill_closed_standard_fds() -> bool:
    """Put /dev/null where a standard descriptor (0-2) is closed; True if one was.

    With fd 0 closed, the next pipe or socket takes number 0: the landlock helper's spec pipe,
    passed by number, was then replaced by the command's /dev/null stdin and the command
    was refused (`sprawl-orch exec -- true <&-`: EOFError in the helper); the exec server's
    connection became the command's stdin (servedfaith). Python has already set sys.stdin /
    sys.stdout to None for a descriptor closed at its start, so the CLI can still tell a
    caller that closed a stream it needs (cli/exec_cmd.py refuses it, E_BAD_REQUEST)."""
    closed = False
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:  # EBADF: closed by the caller
            closed = True
    while closed:
        fd = os.open(os.devnull, os.O_RDWR)  # the lowest free number: a closed one first
        if fd > 2:
            os.close(fd)
            break
    return closed


def main() -> None:
    closed = _fill_closed_standard_fds()
    args = sys.argv[1:]
    if args[:1] == ["exec"] and not {"--help", "--schema"} & set(args[1:2]):
        from sprawl_orch.client.exec_client import in_process, run

        if closed:
            # the in-process CLI is what such a caller gets (servedfaith): it refuses a
            # closed stream the call needs and gives /dev/null to one it does not
            in_process(args[1:], None)
        run(args[1:])
    from sprawl_orch.cli import main as cli

    cli(prog_name="sprawl-orch")
