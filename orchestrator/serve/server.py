"""`sprawl-orch serve`: the exec tool for harnesses in any language, as JSON lines (design §0, §11).

One request per line on stdin, one response per line on stdout with the request's `id`.
Execs run concurrently on a thread pool (`workers`), so responses may come out of order; the
other operations run on their own small pool, so a `halt` is never queued behind windows.
A bad line gets an `E_BAD_REQUEST` response; nothing a client sends ends the server. When stdin
closes (or on SIGTERM), every run is released -- processes killed, cgroups removed -- every copy
and container removed, and the process exits (0 on EOF).

All execs share one backlog, so handles are unique per server and `release(run)` reaches every
command of the run whichever arm ran it. The request's optional `arm` picks an exec tool per
`[sandbox] arm` spelling; each is made on first use and kept.

Pool threads live until the server closes. That matters for bwrap's `--die-with-parent`
(PR_SET_PDEATHSIG fires when the *thread* that forked the command exits, not the process).
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from sprawl_orch.changes.apply import apply
from sprawl_orch.config import Config
from sprawl_orch.config.state import state_dir
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.terminal import json_safe
from sprawl_orch.runs.backlog import Backlog
from sprawl_orch.runs.cgroups import Delegation
from sprawl_orch.runs.output_keep import keeping
from sprawl_orch.runs.results import Refusal
from sprawl_orch.runs.shares import UNSET, Shares
from sprawl_orch.selection.doctor import DoctorReport, doctor_report
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.serve.wire import (
    MAX_REQUEST_BYTES,
    SCHEMA_HINT,
    ApplyRequest,
    ApplyResponse,
    DiscardResponse,
    DoctorResponse,
    ErrorResponse,
    ExecRequest,
    ExecResponse,
    HaltRequest,
    HarvestRequest,
    ProcessesRequest,
    ProcessesResponse,
    ReleaseRequest,
    Request,
    Response,
    ResultsResponse,
    WorkspaceApplyRequest,
    WorkspaceDiscardRequest,
    error_response,
    oversize,
    parse,
)
from sprawl_orch.tool.exec_tool import ExecTool


class Server:
    def __init__(
        self,
        config: Config,
        workdir: Path,
        out: IO[str] | None,
        *,
        shares: Shares = UNSET,
        workers: int = 8,
        backlog: Backlog | None = None,
        offerings: Offerings | None = None,
        found: Delegation | None = None,
    ) -> None:
        """`found`: the cgroup delegation to use (default: read from /sys/fs/cgroup)."""
        self.config = config
        self.workdir = workdir
        self._out = out
        self._out_lock = threading.Lock()
        self._lock = threading.Lock()
        self.session = backlog.session if backlog else secrets.token_hex(4)
        keep = keeping(config, state_dir(config, os.environ))
        self.backlog = backlog or Backlog(self.session, shares, found=found, keeping=keep)
        self._tools: dict[str, ExecTool] = {}
        self._offerings = offerings
        self._execs = ThreadPoolExecutor(workers, thread_name_prefix="sprawl-exec")
        self._control = ThreadPoolExecutor(4, thread_name_prefix="sprawl-control")
        self._closed = False

    # -- the loop -----------------------------------------------------------------------------
    def serve(self, lines: Iterable[str | int], limit: int = MAX_REQUEST_BYTES) -> None:
        """Answer every line (an int: the size of one bounded_lines dropped); returns at
        EOF, after `close()`."""
        try:
            for line in lines:
                if isinstance(line, int):
                    self._write(oversize(line, limit))
                elif line.strip():
                    self.submit(line)
        finally:
            self.close()

    def submit(self, line: str) -> None:
        request = parse(line)
        if isinstance(request, ErrorResponse):
            self._write(request)
            return
        self.dispatch(request).add_done_callback(lambda done: self._write(done.result()))

    def dispatch(self, request: Request) -> Future[Response]:
        """Answer on the right pool (execs, or control so a halt is never queued behind
        windows); the future never raises. Other front ends (mcp_server.py) use this too:
        the pools' threads live until close(), which bwrap's --die-with-parent needs."""
        pool = self._execs if isinstance(request, ExecRequest) else self._control
        return pool.submit(self.respond, request)

    def respond(self, request: Request) -> Response:
        """`handle`, with every failure turned into an error response carrying the id."""
        try:
            return self.handle(request)
        except SprawlError as err:
            return error_response(request.id, request.op, err)
        except Exception as err:  # a bug must not end the server or lose the id
            return ErrorResponse(
                id=request.id,
                op=request.op,
                error=Refusal(
                    code=ErrorCode.INTERNAL,
                    subject=request.op,
                    detail=f"{type(err).__name__}: {err}",
                    recovery="report this; the server keeps serving",
                ),
            )

    def _write(self, response: BaseModel) -> None:
        if self._out is None:  # answers go through dispatch() (mcp_server.py)
            return
        # C1 controls and bidi marks a command put in a name, escaped (terminal.py)
        text = json_safe(response.model_dump_json()) + "\n"
        with self._out_lock:
            try:
                self._out.write(text)
                self._out.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the client is gone; closing follows from stdin's EOF

    # -- operations ---------------------------------------------------------------------------
    def handle(self, request: Request) -> Response:
        if isinstance(request, ExecRequest):
            tool = self.tool(request.arm or self.config.sandbox.arm)
            try:
                result = tool.exec(
                    request.command,
                    shell=request.shell,
                    where=request.where,
                    window=request.window,
                    run=request.run,
                    workspace=request.run if request.workspace else None,
                )
            except TypeError as err:  # a str command without shell: a line, not a program
                raise SprawlError(ErrorCode.BAD_REQUEST, "command", str(err), SCHEMA_HINT) from err
            return ExecResponse(id=request.id, op="exec", result=result)
        if isinstance(request, HarvestRequest):
            # One shared backlog: any tool harvests every tool's commands (and records them).
            return ResultsResponse(id=request.id, op="harvest", results=self._any_tool().harvest())
        if isinstance(request, HaltRequest):
            return ExecResponse(
                id=request.id, op="halt", result=self._any_tool().halt(request.handle)
            )
        if isinstance(request, ReleaseRequest):
            results = self._any_tool().release(request.run)
            return ResultsResponse(id=request.id, op="release", results=results)
        if isinstance(request, ProcessesRequest):
            return ProcessesResponse(
                id=request.id, op="processes", runs=self._any_tool().processes()
            )
        if isinstance(request, ApplyRequest):
            # Never a protected path: the one asking is an agent, which cannot consent for the
            # person; the answer names what was held and the command the person runs.
            applied = apply(
                state_dir(self.config, os.environ),
                request.handle,
                request.paths or None,
                dry_run=request.dry_run,
                workdir=self.workdir,
                protected_globs=self.config.apply.protected,
                unprotect=self.config.apply.unprotect,
                config_path=self.config.source,
            )
            return ApplyResponse(id=request.id, op="apply", result=applied)
        if isinstance(request, WorkspaceApplyRequest):
            ws = self._any_tool().workspace(request.run)
            # The person's [apply] globs hold here as on `apply` above (never `protected`,
            # and never a conflict by name: an agent cannot consent for the person).
            done = ws.apply(
                request.paths or None,
                dry_run=request.dry_run,
                protected_globs=self.config.apply.protected,
                unprotect=self.config.apply.unprotect,
                conflicts_by_name=False,
            )
            return ApplyResponse(id=request.id, op="workspace_apply", result=done)
        if isinstance(request, WorkspaceDiscardRequest):
            self._any_tool().discard_workspace(request.run)
            with self._lock:
                for tool in self._tools.values():
                    tool.forget_workspace(request.run)
            return DiscardResponse(id=request.id, op="workspace_discard", run=request.run)
        return DoctorResponse(id=request.id, op="doctor", report=self._doctor())

    def _any_tool(self) -> ExecTool:
        """Control operations act on the shared backlog; any tool will do (and records)."""
        with self._lock:
            existing = next(iter(self._tools.values()), None)
        return existing or self.tool(self.config.sandbox.arm)

    def tool(self, arm: str) -> ExecTool:
        """The exec tool for one `[sandbox] arm` spelling, made on first use."""
        with self._lock:
            tool = self._tools.get(arm)
            if tool is None and self._closed:
                raise SprawlError(
                    ErrorCode.TOOL_UNAVAILABLE,
                    "serve",
                    "the server is closing",
                    "start a new sprawl-orch serve",
                )
            if tool is None:
                sandbox = self.config.sandbox.model_copy(update={"arm": arm})
                config = self.config.model_copy(update={"sandbox": sandbox})
                tool = ExecTool(
                    config,
                    self.workdir,
                    offerings=self._offerings,
                    session=self.session,
                    backlog=self.backlog,
                )
                self._tools[arm] = tool
            return tool

    def _doctor(self) -> DoctorReport:
        # Engines included: doctor's rows are per engine. Sampled outside the lock (engine
        # admission runs probe containers), then kept for tools made later.
        offerings = self._offerings or Offerings.this_machine(self.config)
        with self._lock:
            self._offerings = self._offerings or offerings
        return doctor_report(offerings, self.config, self.backlog.found, os.environ)

    def close(self) -> None:
        """Release everything; wait for in-flight requests to answer. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tools = list(self._tools.values())
        # Kills every command (in its window or in the backlog); their execs then answer.
        self.backlog.close("the server is closing (its stdin closed): every run was released")
        self._execs.shutdown(wait=True)
        self._control.shutdown(wait=True)
        for tool in tools:
            tool.close()
