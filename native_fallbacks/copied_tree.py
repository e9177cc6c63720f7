"""The copied tree: the command runs as a host process inside the synced copy.

It is also the base of every host-process mechanism: bwrap and seatbelt only
add a probe and a pure `wrap(argv, copy)`. The process runs one level below the
orchestrator (yielding) in its own process group.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sprawl_orch.core.arms import ASSURANCES, ArmName
from sprawl_orch.core.assurances import Assurances
from sprawl_orch.runs.launch import Launch, Running
from sprawl_orch.runs.process import HostProcess
from sprawl_orch.runs.yielding import Yielders, yield_prefix


class CopiedTreeArm:
    name: ArmName = ArmName.COPIED_TREE

    def __init__(self, yielders: Yielders) -> None:
        self.yielders = yielders

    def assurances(self) -> Assurances:
        return ASSURANCES[self.name]

    def note(self) -> str | None:
        # Nothing stops a write by absolute path, and the copy cannot sit at the working
        # directory's path without a namespace: a path recorded in the tree (an editable
        # install, a venv) names the person's tree (the conformance probe writes by it).
        return (
            "It runs in a copy of your working directory, so writes relative to it land in "
            "the copy; a write by absolute path is not stopped, including through a path "
            "recorded in the tree (an editable install, a virtualenv) that names your tree."
        )

    def prepare(self, workdir: Path) -> None:
        return None

    def wrap(self, argv: Sequence[str], copy: Path) -> list[str]:
        return list(argv)

    def start(self, launch: Launch) -> Running:
        argv = yield_prefix(self.yielders) + self.wrap(launch.argv, launch.cwd)
        return HostProcess(
            argv,
            launch.cwd,
            launch.env,
            launch.outputs,
            join=launch.join,
            watcher=launch.watcher,
            given=launch.given,
        )

    def close(self) -> None:
        return None
