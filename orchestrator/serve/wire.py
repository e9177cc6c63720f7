"""`sprawl-orch serve`'s wire: the requests and responses as pydantic models (the schema
`serve --schema` prints and docs/serve.md describes), a line read within its byte bound, a line
parsed into a request or the E_BAD_REQUEST response for it. The Server (server.py) and the MCP
surface (mcp_server.py, mcp_stdio.py) speak it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from sprawl_orch.changes.apply import ApplyResult
from sprawl_orch.config import ArmSpelling
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.backlog import RunProcesses
from sprawl_orch.runs.results import ExecResult, Refusal
from sprawl_orch.selection.doctor import DoctorReport

RequestId = str | int
SCHEMA_HINT = "see `sprawl-orch serve --schema` and docs/serve.md"


class _Request(BaseModel):
    # Strict: `"id": true` is not the id 1, `"window": "5"` is not 5 seconds.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    id: RequestId


class ExecRequest(_Request):
    op: Literal["exec"]
    command: list[str] | str = Field(description="program + args, or one shell line")
    shell: bool = False
    where: Literal["sandbox", "host"] = "sandbox"
    window: float | None = Field(default=None, gt=0, description="seconds in the foreground")
    run: str = Field(default="default", min_length=1, max_length=256)
    arm: ArmSpelling | None = Field(default=None, description="overrides [sandbox] arm")
    workspace: bool = Field(
        default=False,
        description="run in the run's workspace: the agent's changes last across its "
        "commands until workspace_apply or workspace_discard (one workspace per run)",
    )


class HarvestRequest(_Request):
    op: Literal["harvest"]


class HaltRequest(_Request):
    op: Literal["halt"]
    handle: str


class ReleaseRequest(_Request):
    op: Literal["release"]
    run: str


class ProcessesRequest(_Request):
    op: Literal["processes"]


class DoctorRequest(_Request):
    op: Literal["doctor"]


class ApplyRequest(_Request):
    op: Literal["apply"]
    handle: str = Field(description="a result's changes.handle")
    paths: list[str] = Field(
        default=[], description="what to apply (and what is beneath it); empty: every change"
    )
    dry_run: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_consent(cls, data: Any) -> Any:
        if isinstance(data, dict) and "protected" in data:
            raise ValueError(
                "protected paths are never applied through serve or MCP: an agent cannot "
                "consent for the person; the answer's `held` and `command` say what a person "
                "runs at a terminal to apply them"
            )
        return data


class WorkspaceApplyRequest(_Request):
    op: Literal["workspace_apply"]
    run: str = Field(default="default", min_length=1, max_length=256)
    paths: list[str] = Field(
        default=[], description="what to apply (and what is beneath it); empty: every change"
    )
    dry_run: bool = False


class WorkspaceDiscardRequest(_Request):
    op: Literal["workspace_discard"]
    run: str = Field(default="default", min_length=1, max_length=256)


Request = Annotated[
    ExecRequest
    | HarvestRequest
    | HaltRequest
    | ReleaseRequest
    | ProcessesRequest
    | DoctorRequest
    | ApplyRequest
    | WorkspaceApplyRequest
    | WorkspaceDiscardRequest,
    Field(discriminator="op"),
]
REQUEST: TypeAdapter[Request] = TypeAdapter(Request)


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: RequestId | None
    ok: bool = True


class ExecResponse(_Response):
    op: Literal["exec", "halt"]
    result: ExecResult


class ResultsResponse(_Response):
    op: Literal["harvest", "release"]
    results: list[ExecResult]
    left: str | None = None  # release: what could not be removed


class ProcessesResponse(_Response):
    op: Literal["processes"]
    runs: dict[str, RunProcesses]


class DoctorResponse(_Response):
    op: Literal["doctor"]
    report: DoctorReport


class ApplyResponse(_Response):
    op: Literal["apply", "workspace_apply"]
    result: ApplyResult


class DiscardResponse(_Response):
    op: Literal["workspace_discard"]
    run: str


class ErrorResponse(_Response):
    op: str | None = None
    ok: bool = False
    error: Refusal


Response = (
    ExecResponse
    | ResultsResponse
    | ProcessesResponse
    | DoctorResponse
    | ApplyResponse
    | DiscardResponse
    | ErrorResponse
)


def schema() -> dict[str, Any]:
    return {
        "request": REQUEST.json_schema(),
        "response": TypeAdapter(Response).json_schema(),
    }


def error_response(rid: RequestId | None, op: str | None, err: SprawlError) -> ErrorResponse:
    return ErrorResponse(id=rid, op=op, error=Refusal.of(err))


def bad_request(rid: RequestId | None, subject: str, detail: str) -> ErrorResponse:
    err = SprawlError(ErrorCode.BAD_REQUEST, subject, detail, SCHEMA_HINT)
    return error_response(rid, None, err)


# A request line's bound (issue 30: a 200 MB line took the server to 680 MB RSS). 8 MiB holds
# any command line the kernel would exec (arg_bounds.py) several times over.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
_DISCARD_CHUNK = 1024 * 1024


def bounded_lines(stream: IO[bytes], limit: int = MAX_REQUEST_BYTES) -> Iterator[str | int]:
    """Each line of `stream`, decoded; for a line over `limit` bytes its size (an int)
    instead -- read and dropped a chunk at a time, never held whole."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            size = len(line)
            while more := stream.readline(_DISCARD_CHUNK):
                size += len(more)
                if more.endswith(b"\n"):
                    break
            yield size
            continue
        yield line.decode("utf-8", errors="replace")


def oversize(size: int, limit: int) -> ErrorResponse:
    """Never an echo of the request: only the numbers."""
    return bad_request(
        None,
        "request",
        f"the request line is {size} bytes, over the limit of {limit} bytes "
        "(serve --max-request-bytes); it was dropped unread",
    )


def parse(line: str) -> Request | ErrorResponse:
    """A request, or the E_BAD_REQUEST response for it (with its id when one can be read)."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as err:
        return bad_request(None, "request", f"not a JSON value: {err}")
    except RecursionError:
        # attack3: '[' * 300000 (600 kB, inside the size bound) took the whole server down
        return bad_request(None, "request", "the JSON value is nested too deeply to read")
    rid = raw.get("id") if isinstance(raw, dict) else None
    rid = rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None
    try:
        return REQUEST.validate_python(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        return bad_request(
            rid,
            where,
            # the kind of value found, never the value: a request is not echoed back
            f"{first['msg']} (found a {type(first.get('input')).__name__})"
            + (f"; {err.error_count() - 1} more" if err.error_count() > 1 else ""),
        )
