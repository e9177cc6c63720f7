"""Reading a caller's lifeline: every whole line until EOF, applied to a watch list.

Shared by the guardian of one caller (guardian/__main__.py: a pipe) and the shared guardian
(guardian/server.py: one connection per caller); a leaf, so neither imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from sprawl_orch.guardian.protocol import ProtocolError, parse_message
from sprawl_orch.guardian.watchlist import Watchlist

Log = Callable[..., None]


def whole_lines(fd: int, log: Log, **fields: object) -> Iterator[bytes]:
    """Every whole line read from `fd` until EOF. A last line without its newline is
    dropped: the writer died inside it, and a cut name could name someone else's container."""
    with os.fdopen(fd, "rb", buffering=0, closefd=False) as raw:
        pending = b""
        while True:
            try:
                chunk = raw.read(65536)
            except ConnectionResetError:  # a socket whose peer died with unread replies
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            yield from lines
        if pending:
            log("cut-line", line=pending[:200].decode("utf-8", "replace"), **fields)


def apply_lines(lines: Iterator[bytes], watch: Watchlist, log: Log, **fields: object) -> int:
    """Apply every line; return how many were refused."""
    refused = 0
    for line in lines:
        try:
            watch.apply(parse_message(line.decode("utf-8")))
        except (ProtocolError, UnicodeDecodeError) as err:
            refused += 1
            log("refused-line", line=line[:200].decode("utf-8", "replace"), why=str(err), **fields)
    return refused
