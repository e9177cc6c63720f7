"""What an exec tool offers over its commands past their window (ExecTool inherits it):
harvest, halt, release, processes -- the backlog's (runs/backlog.py), each result recorded.

Split out of exec_tool.py so that it stays the story of one command (files under ~400 lines).
"""

from __future__ import annotations

from sprawl_orch.runs.backlog import Backlog, RunProcesses
from sprawl_orch.runs.results import ExecResult


class BacklogApi:
    """The backlog methods of ExecTool; `backlog` and `_record` are ExecTool's."""

    backlog: Backlog

    def _record(self, result: ExecResult) -> None:
        raise NotImplementedError  # ExecTool's: one ledger line per result

    def harvest(self) -> list[ExecResult]:
        """Results of background commands that have finished since the last call.

        Returns:
            Each finished command's full result, once.
        """
        return [self._recorded(r) for r in self.backlog.harvest()]

    def halt(self, handle: str) -> ExecResult:
        """Kill one background command: its whole process group, or its container.

        Args:
            handle: the ``handle`` of its ``backgrounded`` result.

        Returns:
            Its result (``killed``), which `harvest` then does not return again.

        Raises:
            SprawlError: E_UNKNOWN_HANDLE when no command of this tool has that handle.
        """
        return self._recorded(self.backlog.halt(handle))

    def release(self, run: str) -> list[ExecResult]:
        """Kill every command of `run` and remove its cgroup.

        Args:
            run: the ``run`` the commands were started with.

        Returns:
            The results of the commands it ended (none when the run had none running).
        """
        return [self._recorded(r) for r in self.backlog.release(run)]

    def processes(self) -> dict[str, RunProcesses]:
        """What each run holds now.

        Returns:
            Per run: its live pids, the commands whose descendants can't all be listed, its
            share and its CPU affinity.
        """
        return self.backlog.processes()

    def _recorded(self, result: ExecResult) -> ExecResult:
        self._record(result)
        return result
