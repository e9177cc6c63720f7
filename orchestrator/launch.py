"""The small interface every arm implements (the httpx BaseTransport shape).

An arm is asked to `start` a `Launch` and hands back a `Running`; the exec tool
waits on it for the window, kills it or hands it to the backlog, and reads the
`Finished` record. Arms never build results: `results.py` owns every key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.arms import ArmName
from orchestrator.assurances import Assurances


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    outputs: Path
    tag: str
    session: str
    run: str = "default"
    # The shell line as written, when the shell arm expanded it into argv.
    shell_line: str | None = None


@dataclass(frozen=True)
class Finished:
    exit_code: int | None
    stdout_path: Path
    stderr_path: Path
    killed: bool = False
    oom_killed: bool = False
    extra: Mapping[str, object] = field(default_factory=dict)


class Running(Protocol):
    def wait(self, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds (None: forever); True once the command ended."""
        ...

    def kill(self) -> None:
        """End the whole command: every process it started, or its container."""
        ...

    def pids(self) -> list[int]:
        """Host pids of the command's processes (empty when not visible from here)."""
        ...

    def finish(self) -> Finished:
        """Collect the outcome and release what the command held. Call after wait()."""
        ...


class Arm(Protocol):
    name: ArmName

    def assurances(self) -> Assurances:
        ...

    def note(self) -> str | None:
        """A sentence added to the statement (e.g. why the user axis is not kept)."""
        ...

    def prepare(self, workdir: Path) -> None:
        """Probes that must pass before any copy is made; raise SprawlError to refuse."""
        ...

    def start(self, launch: Launch) -> Running:
        ...

    def close(self) -> None:
        """Release per-tool resources (engine clients, ...). Never raises."""
        ...
