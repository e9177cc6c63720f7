"""The MCP stdio transport with a bound on a message line (issue 30 break 8).

The SDK's `stdio_server` reads each line whole (`async for line in stdin`): a 200 MB line
is held in memory, parsed, and answered by nothing the client can act on. Here stdin is
read through `serve.bounded_lines`: a line over the limit is dropped unread, a chunk at a
time, and answered with a JSON-RPC error (id null: the id was in what was dropped) whose
message is E_BAD_REQUEST naming the limit -- never the request. The SDK's transport does the
rest (stdout kept for the protocol, fd 1 diverted to stderr); fd 0 is diverted to the null
device here, as the SDK does when it owns stdin, so nothing a handler starts reads the wire.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from sprawl_orch.serve.wire import bounded_lines


class BoundedStdin:
    """An async iterator of stdin's lines for the SDK; oversize ones answered on `errors`."""

    def __init__(self, fd: int, limit: int) -> None:
        # closefd=False: a reader thread may still block on it after the transport ends.
        self._lines: Iterator[str | int] = bounded_lines(os.fdopen(fd, "rb", closefd=False), limit)
        self.limit = limit
        self.errors: Any = None  # the SDK's write stream, set once the transport is up
        self._ready = anyio.Event()

    def answer_on(self, write_stream: Any) -> None:
        self.errors = write_stream
        self._ready.set()

    def __aiter__(self) -> BoundedStdin:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await anyio.to_thread.run_sync(next, self._lines, None, abandon_on_cancel=True)
            if line is None:
                raise StopAsyncIteration
            if isinstance(line, str):
                return line
            await self._ready.wait()
            error = types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"E_BAD_REQUEST: the message line is {line} bytes, over the limit of "
                f"{self.limit} bytes (mcp --max-request-bytes); it was dropped unread",
            )
            reply = types.JSONRPCError(jsonrpc="2.0", id=None, error=error)
            await self.errors.send(SessionMessage(reply))


@contextlib.asynccontextmanager
async def bounded_stdio(limit: int) -> AsyncIterator[tuple[Any, Any]]:
    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    stdin = BoundedStdin(wire, limit)
    try:
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
            stdin.answer_on(write_stream)
            yield read_stream, write_stream
    finally:
        with contextlib.suppress(OSError):
            os.dup2(wire, 0)
