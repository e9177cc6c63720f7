"""`sprawl-orch mcp`: the exec tool as a Model Context Protocol server over stdio (docs/mcp.md).

Built on the official `mcp` SDK (2.x: `mcp.server.mcpserver.MCPServer`, FastMCP's successor)
and thin over `serve.Server`: every tool call becomes the same request model `serve` parses,
answered by the same `Server.dispatch` — same pools, same shared backlog, same release on
close. Only the framing differs: each tool answers with text for the model (mcp_text.py) and
the full JSON result as structured content (whose schema is the tool's output schema).

Tools: exec, harvest, halt, release, doctor, apply (a command's kept changes onto the
working tree, docs/changes.md).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from sprawl_orch.changes.apply import ApplyResult
from sprawl_orch.config import ArmSpelling
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.runs.results import ExecResult
from sprawl_orch.selection.doctor import DoctorReport
from sprawl_orch.serve.mcp_text import apply_text, doctor_text, result_text, results_text
from sprawl_orch.serve.server import Server
from sprawl_orch.serve.wire import (
    ApplyRequest,
    ApplyResponse,
    DiscardResponse,
    DoctorRequest,
    DoctorResponse,
    ErrorResponse,
    ExecRequest,
    ExecResponse,
    HaltRequest,
    HarvestRequest,
    ReleaseRequest,
    Request,
    Response,
    ResultsResponse,
    WorkspaceApplyRequest,
    WorkspaceDiscardRequest,
)

NAME = "sprawl-orch"


class ResultList(BaseModel):
    """harvest / release: the results, and what could not be removed (release)."""

    results: list[ExecResult]
    left: str | None = None


def _text(text: str, structured: dict[str, Any], *, error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=error
    )


def to_tool_result(response: Response) -> CallToolResult:
    """One serve response as what the MCP client receives."""
    if isinstance(response, ErrorResponse):
        err = response.error
        return _text(
            f"{err.code}: {err.subject}: {err.detail}\nwhat you can do: {err.recovery}",
            err.model_dump(mode="json"),
            error=True,
        )
    if isinstance(response, ExecResponse):
        result = response.result
        # A refused command is the tool's answer, not a protocol failure: the model reads why.
        return _text(
            result_text(result), result.as_json_dict(), error=result.outcome == "exceptional"
        )
    if isinstance(response, ResultsResponse):
        empty = (
            "no background command has finished since the last harvest"
            if response.op == "harvest"
            else "the run had no commands"
        )
        listed = ResultList(results=response.results, left=response.left)
        return _text(
            results_text(response.results, empty, response.left), listed.model_dump(mode="json")
        )
    if isinstance(response, ApplyResponse):
        return _text(apply_text(response.result), response.result.as_json_dict())
    if isinstance(response, DoctorResponse):
        return _text(doctor_text(response.report), response.report.model_dump(mode="json"))
    if isinstance(response, DiscardResponse):
        said = f"the workspace of run {response.run!r} is discarded"
        return _text(said, response.model_dump(mode="json"))
    raise TypeError(f"no MCP form for {type(response).__name__}")


def exec_description(server: Server) -> str:
    """What the configured arm keeps, stated in the tool description (design §1: agents see the
    statement there and in every result). Admission runs here, once, as the first exec's would."""
    base = (
        "Run a command confined, in a synced copy of the working directory (nothing you do "
        "changes the person's tree). `command`: a list (program + arguments) or a string (one "
        "shell line). Runs in the foreground for `window` seconds; still running after that, "
        "it is backgrounded with a handle (then use `harvest`, or `halt`). Every result states "
        "which of five guarantees (filesystem, network, process_tree, user, resources) held."
    )
    try:
        tool = server.tool(server.config.sandbox.arm)
        said = tool.confinement(tool.arm()).statement
    except SprawlError as err:
        said = f"the configured arm is unavailable: {err.detail} ({err.recovery})"
    return f"{base}\nHere: {said}"


def build(server: Server, *, describe: bool = True) -> MCPServer[Any]:
    """The MCP server over `server` (which the caller closes)."""
    app: MCPServer[Any] = MCPServer(
        NAME, instructions="Run shell commands confined; each result says what held."
    )
    ids = itertools.count(1)

    async def call(make: Callable[[int], Request]) -> CallToolResult:
        future = server.dispatch(make(next(ids)))
        return to_tool_result(await asyncio.wrap_future(future))

    async def exec_(
        command: Annotated[
            list[str] | str,
            Field(description="program + arguments (a list), or one shell line (a string)"),
        ],
        window: Annotated[
            float | None,
            Field(gt=0, description="seconds in the foreground (default: the config's)"),
        ] = None,
        where: Annotated[
            Literal["sandbox", "host"],
            Field(description="'host' runs in the person's tree, unconfined; ask only when told"),
        ] = "sandbox",
        run: Annotated[
            str,
            Field(min_length=1, max_length=256, description="the agent session this belongs to"),
        ] = "default",
        arm: Annotated[
            ArmSpelling | None, Field(description="override the configured [sandbox] arm")
        ] = None,
        workspace: Annotated[
            bool,
            Field(
                description="run in this run's workspace: your changes last across your "
                "commands (tests see your edits) until workspace_apply or workspace_discard"
            ),
        ] = False,
    ) -> Annotated[CallToolResult, ExecResult]:
        shell = isinstance(command, str)
        return await call(
            lambda rid: ExecRequest(
                id=rid,
                op="exec",
                command=command,
                shell=shell,
                where=where,
                window=window,
                run=run,
                arm=arm,
                workspace=workspace,
            )
        )

    async def harvest() -> Annotated[CallToolResult, ResultList]:
        return await call(lambda rid: HarvestRequest(id=rid, op="harvest"))

    async def halt(
        handle: Annotated[str, Field(description="the handle of a backgrounded command")],
    ) -> Annotated[CallToolResult, ExecResult]:
        return await call(lambda rid: HaltRequest(id=rid, op="halt", handle=handle))

    async def release(
        run: Annotated[str, Field(description="the run whose commands are all killed")],
    ) -> Annotated[CallToolResult, ResultList]:
        return await call(lambda rid: ReleaseRequest(id=rid, op="release", run=run))

    async def doctor() -> Annotated[CallToolResult, DoctorReport]:
        return await call(lambda rid: DoctorRequest(id=rid, op="doctor"))

    async def apply(
        handle: Annotated[str, Field(description="a result's changes.handle")],
        paths: Annotated[
            list[str] | None,
            Field(
                description="what to apply (a path also chooses what is beneath it); "
                "none: every change"
            ),
        ] = None,
        dry_run: Annotated[bool, Field(description="only say what would change")] = False,
    ) -> Annotated[CallToolResult, ApplyResult]:
        return await call(
            lambda rid: ApplyRequest(
                id=rid, op="apply", handle=handle, paths=paths or [], dry_run=dry_run
            )
        )

    async def workspace_apply(
        run: Annotated[str, Field(description="the run whose workspace is applied")] = "default",
        paths: Annotated[
            list[str] | None,
            Field(description="what to apply (a path chooses what is beneath it); none: all"),
        ] = None,
        dry_run: Annotated[bool, Field(description="only say what would change")] = False,
    ) -> Annotated[CallToolResult, ApplyResult]:
        return await call(
            lambda rid: WorkspaceApplyRequest(
                id=rid, op="workspace_apply", run=run, paths=paths or [], dry_run=dry_run
            )
        )

    async def workspace_discard(
        run: Annotated[str, Field(description="the run whose workspace is dropped")] = "default",
    ) -> CallToolResult:
        return await call(
            lambda rid: WorkspaceDiscardRequest(id=rid, op="workspace_discard", run=run)
        )

    quiet = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    app.add_tool(
        exec_,
        name="exec",
        description=exec_description(server) if describe else None,
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False),
    )
    app.add_tool(
        harvest,
        description="Results of background commands that finished since the "
        "last harvest (each returned once).",
        annotations=quiet,
    )
    app.add_tool(
        halt,
        description="Kill one backgrounded command (every process it started, "
        "or its container) and return its result.",
    )
    app.add_tool(release, description="Kill every command of a run; their results.")
    app.add_tool(
        doctor,
        description="What this machine offers: every arm, its five "
        "guarantees, what is missing and how to get it.",
        annotations=quiet,
    )
    app.add_tool(
        apply,
        description="Apply a command's changes (its result's changes.handle) "
        "onto the person's working tree; refuses what changed there since the sync. "
        "Protected paths (git hooks/config, editor tasks, CI, shell start-up) are never "
        "applied here: the answer lists them as held, with the command the person runs. "
        "Use dry_run first to see the diff.",
        annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False),
    )
    app.add_tool(
        workspace_apply,
        description="Apply the run's workspace (exec with workspace=true) onto the person's "
        "tree under apply's rules; a path the person changed too is a conflict, held back "
        "unless named in paths. Use dry_run first to see the diff.",
        annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False),
    )
    app.add_tool(
        workspace_discard,
        description="Drop the run's workspace and its changes; the next workspace command "
        "starts from the person's tree.",
        annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False),
    )
    return app
