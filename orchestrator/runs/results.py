"""The one owner of every key of an exec result (design §10).

Shapes, by `outcome`:
  settled       finished within the window: exit_code, stdout, stderr
  backgrounded  handed to the backlog: handle
  exceptional   refused or failed to start: the four keys of a `Refusal` (code, subject,
                detail, recovery), the same four a config-time refusal and a serve error carry

Output past `OUTPUT_CAP` bytes per stream is cut here; the full text stays on
disk and the result points at it ("the way back"). Text is UTF-8 with
replacement, so undecodable bytes show as U+FFFD (the encoding failure class
reads exactly that).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from sprawl_orch.changes.changes import Changes
from sprawl_orch.copy.sync import FileWork
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress.record import POSSIBLE_ANY, POSSIBLE_NONE
from sprawl_orch.runs.launch import Finished
from sprawl_orch.runs.output_keep import OUTPUT_CAP, OutputKeeping

LimitName = Literal["memory", "pids", "fuel", "time"]
LIMIT_NAMES: tuple[LimitName, ...] = ("memory", "pids", "fuel", "time")

__all__ = ["OUTPUT_CAP"]

Outcome = Literal["settled", "backgrounded", "exceptional"]


class Refusal(BaseModel):
    """The one shape of a refusal: `exec --json` before a tool exists (a config fault), a
    serve error, and the four keys of an exceptional result are all this."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    code: ErrorCode
    subject: str
    detail: str
    recovery: str

    @classmethod
    def of(cls, err: SprawlError) -> Refusal:
        """The refusal a SprawlError says.

        Args:
            err: the error.

        Returns:
            Its code, subject, detail and recovery.
        """
        return cls(code=err.code, subject=err.subject, detail=err.detail, recovery=err.recovery)

    def as_result(self) -> dict[str, Any]:
        """The result of a command refused before any exec tool exists.

        Returns:
            ``exec --json``'s answer to a config fault: outcome "exceptional" and these
            four keys.
        """
        return {"outcome": "exceptional", **self.model_dump(mode="json")}


class Confinement(BaseModel):
    model_config = ConfigDict(frozen=True)
    arm: str
    statement: str
    assurances: dict[str, str]


class ExecResult(BaseModel):
    """What happened to one command, the same keys on every surface (`exec --json`, serve,
    MCP, the ledger, the API): `outcome` settled / backgrounded / exceptional; `statement`
    says it in words. `sprawl-orch exec --schema` prints its JSON schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: Outcome
    arm: str
    where: Literal["sandbox", "host"] = "sandbox"
    command: list[str] = []
    shell: bool = False
    stdout: str = ""
    stderr: str = ""
    stdout_full: str | None = None
    stderr_full: str | None = None
    exit_code: int | None = None
    killed: bool = False
    handle: str | None = None
    # exceptional: the Refusal's code (E_...), subject, detail and recovery.
    code: ErrorCode | None = None
    subject: str | None = None
    detail: str | None = None
    recovery: str | None = None
    background: bool = False
    env: list[str] = []
    interpreter: str | None = None
    memory_ceiling: dict[str, Any] | None = None
    confinement: Confinement | None = None
    work: FileWork | None = None
    changes: Changes | None = None  # what the command changed in its copy (changes.py)
    # A stream past OUTPUT_CAP: its size, what of it was kept (output_keep.py), the kept
    # outputs dropped to stay within the budget, and why none was kept if so.
    kept_output: dict[str, Any] | None = None
    container: dict[str, Any] | None = None
    # The python arm (native_fallbacks/wasi_python.py): its limits, what ended the guest
    # ("trap": wasmtime's message, "limit": fuel | memory | time), fuel used, memory at end.
    python: dict[str, Any] | None = None
    # "possible": what the command could reach — "none" (the network axis kept),
    # "allow-list" (through the proxy), "any" (an arm that does not keep the axis).
    # With `[sandbox.network] allow` also: "egress", one entry per connection asked of the
    # proxy (egress/record.py: host, port, allowed, reason, bytes up/down, duration; the
    # first 1000 / 512 KiB), "egress_dropped" (records past that), "summary" (the
    # statement's sentence, every connection counted), "proxy_failure" if the proxy stopped.
    network: dict[str, Any] | None = None
    run: str = "default"
    duration_ms: float | None = None
    # Limits the kernel enforced on this command: "memory" (an OOM kill in its container
    # or its run's cgroup), "pids" (a fork refused at the pids limit); the python arm's
    # runtime: "fuel" (its CPU), "memory" (its linear memory), "time" (its wall time).
    limits_hit: list[LimitName] = []

    def as_json_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data.

        Returns:
            Every key, as `exec --json`, serve, MCP and the ledger show it.
        """
        return self.model_dump(mode="json")

    @property
    def statement(self) -> str:
        """What happened, in words, on every arm: the refusal, or the confinement statement
        followed by the limits that were hit and how the command ended."""
        if self.outcome == "exceptional":
            return (
                f"{self.code.value if self.code else 'refused'}: {self.subject}: "
                f"{self.detail} (what you can do: {self.recovery})"
            )
        first = self.confinement.statement if self.confinement else f"Ran on {self.arm}."
        lines = [first, *(s for s in self.limit_sentences() if s not in first)]
        if self.network and self.network.get("summary"):
            lines.append(str(self.network["summary"]))
        if self.network and self.network.get("proxy_failure"):
            lines.append(
                f"The proxy failed, which ended the network: {self.network['proxy_failure']}"
            )
        if self.detail:
            lines.append(self.detail)
        return "\n".join(lines)

    def limit_sentences(self) -> list[str]:
        """The limits the kernel enforced on this command, in words.

        Returns:
            One sentence per entry of ``limits_hit``, with its number and what to raise.
        """
        return [self._limit_sentence(limit) for limit in self.limits_hit]

    def _limit_sentence(self, limit: str) -> str:
        if self.python is not None:
            return _python_sentence(limit, self.python)
        limits = (self.container or {}).get("limits") or {}
        if limit == "pids":
            return (
                f"Process limit reached: the kernel refused a fork at the pids limit of "
                f"{limits.get('pids', '?')}; raise [sandbox.container] pids if the "
                "command needs more processes."
            )
        if isinstance(limits, dict) and "memory_bytes" in limits:
            return (
                f"Out of memory: the kernel's OOM killer killed the command's process(es) "
                f"at its memory limit of {limits['memory_bytes']} bytes (SIGKILL, exit "
                "137 when it was the main one); raise [sandbox.container] memory_bytes "
                "if it needs more."
            )
        ceiling = self.memory_ceiling or {}
        return (
            f"Out of memory: the kernel's OOM killer killed process(es) of run "
            f"{self.run!r} at its memory ceiling of {ceiling.get('limit_bytes', '?')} "
            "bytes (SIGKILL, exit 137 when it was the command itself)."
        )


def _python_sentence(limit: str, info: dict[str, Any]) -> str:
    if limit == "fuel":
        return (
            f"CPU limit reached: the guest used all its {info.get('fuel')} fuel and was "
            "stopped (a wasm trap, exit 137); raise [sandbox.python] fuel if it needs more."
        )
    if limit == "time":
        return (
            f"Wall-time limit reached: the guest ran {info.get('wall_seconds')} s and was "
            "interrupted (exit 137); raise [sandbox.python] wall_seconds if it needs more."
        )
    return (
        f"Memory limit reached: the guest's memory grew to {info.get('memory_bytes_at_end')} "
        f"of its {info.get('memory_bytes')} bytes and a further grow was refused; raise "
        "[sandbox.python] memory_bytes if it needs more."
    )


def read_capped(path: Path, keep_dir: Path | None) -> tuple[str, str | None]:
    """The first OUTPUT_CAP bytes as text; when the stream was longer, the file is
    moved to `keep_dir` (if given, uncut) and its path returned as the way back. Commands'
    results keep through backlog.py's OutputKeeping, which also bounds what is kept."""
    got = OutputKeeping(keep_dir or path.parent, keep_bytes=1 << 62).stream(path, keep_dir)
    return got.text, got.full


@dataclass(frozen=True)
class Started:
    """The keys every result of a started command carries, whatever became of it (the
    backlog knows them; the result is made here)."""

    arm: str
    where: Literal["sandbox", "host"]
    command: list[str]
    shell: bool
    env: list[str]
    interpreter: str | None
    confinement: Confinement
    work: FileWork | None
    run: str
    duration_ms: float

    def fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def backgrounded(
    started: Started, handle: str, window: float, memory_ceiling: dict[str, Any] | None
) -> ExecResult:
    """Still running when its window passed: the handle to harvest or halt it by."""
    return ExecResult(
        outcome="backgrounded",
        handle=handle,
        background=True,
        detail=f"still running after the window of {window:g} s: handed to the backlog "
        f"as {handle}; harvest() returns its result when it ends, halt() ends it",
        memory_ceiling=memory_ceiling,
        **started.fields(),
    )


def settled(
    started: Started,
    finished: Finished,
    *,
    stdout: tuple[str, str | None],
    stderr: tuple[str, str | None],
    detail: str | None,
    memory_ceiling: dict[str, Any] | None,
    container: dict[str, Any] | None,
    background_handle: str | None,
    changes: Changes | None,
    network: dict[str, Any] | None = None,
    kept_output: dict[str, Any] | None = None,
) -> ExecResult:
    """It ended (or was killed): `stdout`/`stderr` as read_capped gave them; the memory
    limit counts as hit on the container's OOM kill or the run ceiling's verdict "hit"."""
    hit: list[LimitName] = []
    if finished.oom_killed or (memory_ceiling or {}).get("state") == "hit":
        hit.append("memory")
    if finished.pids_hit:
        hit.append("pids")
    if network is None:
        kept = started.confinement.assurances.get("network") == "yes"
        network = {"possible": POSSIBLE_NONE if kept else POSSIBLE_ANY}
    hit += [h for h in LIMIT_NAMES if h in finished.limits_hit and h not in hit]
    python = finished.extra.get("python")
    result = ExecResult(
        outcome="settled",
        stdout=stdout[0],
        stderr=stderr[0],
        stdout_full=stdout[1],
        stderr_full=stderr[1],
        exit_code=finished.exit_code,
        killed=finished.killed,
        detail=detail,
        memory_ceiling=memory_ceiling,
        container=container,
        python=dict(python) if isinstance(python, dict) else None,
        network=network,
        handle=background_handle,
        background=background_handle is not None,
        changes=changes,
        kept_output=kept_output,
        limits_hit=hit,
        **started.fields(),
    )
    if not hit:
        return result
    # The JSON result's statement (`confinement.statement`) says a limit that was hit as the
    # human line does (issue 27: only `limits_hit` said it); `statement` does not repeat it.
    said = "\n".join([started.confinement.statement, *result.limit_sentences()])
    confinement = started.confinement.model_copy(update={"statement": said})
    return result.model_copy(update={"confinement": confinement})


def never_ran(started: Started, err: SprawlError, container: dict[str, Any] | None) -> ExecResult:
    """Started, but the program never ran (not in the image, no loader): a refusal like any
    other arm's, with what the start left (the container's record)."""
    fields = started.fields()
    return exceptional(fields.pop("arm"), err, container=container, **fields)


def exceptional(arm: str, err: SprawlError, **fields: Any) -> ExecResult:
    return ExecResult(
        outcome="exceptional",
        arm=arm,
        code=err.code,
        subject=err.subject,
        detail=err.detail,
        recovery=err.recovery,
        **fields,
    )
