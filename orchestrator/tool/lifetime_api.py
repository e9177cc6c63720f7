"""An exec tool's life around its commands (ExecTool inherits it): its outputs directory
claimed, its guardian made once, and `close()` -- what the context manager ends with.

Split out of exec_tool.py so that it stays the story of one command (files under ~400 lines).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from sprawl_orch.config import Config
from sprawl_orch.core.removal import delete_quietly
from sprawl_orch.runs.backlog import Backlog
from sprawl_orch.runs.guardian_client import Guardian, session_guardian
from sprawl_orch.runs.output_keep import claim, sweep
from sprawl_orch.tool.arm import ToolArm


class LifetimeApi:
    """The lifetime methods of ExecTool; the attributes are ExecTool's (set in its __init__)."""

    config: Config
    state: Path
    environ: Mapping[str, str]
    session: str
    shared_guardian: bool
    backlog: Backlog
    outputs_root: Path
    _lock: threading.RLock
    _guardian: Guardian | None
    _claim: int | None
    _closed: bool
    _owns_backlog: bool
    _arms: ToolArm

    def _claim_outputs(self) -> None:
        """Mark outputs/<session>/ as this live process's, and remove those of dead ones
        (a CLI killed by SIGKILL never removes its own: output_keep.py)."""
        with self._lock:
            if self._claim is None:
                self._claim = claim(self.outputs_root)
                sweep(self.outputs_root.parent, keep=self.outputs_root)

    def guardian(self) -> Guardian:
        """The session's guardian, made on the first sandboxed command; one per exec tool,
        not per command, closed with the tool.

        Returns:
            The Watcher every container, process group, copy and cgroup is announced to
            (runs/guardian_client.py).
        """
        with self._lock:  # one guardian even when the first commands arrive together
            if self._guardian is None:
                self._guardian = session_guardian(
                    self.config, self.state, self.environ, self.session, shared=self.shared_guardian
                )
            return self._guardian

    def close(self) -> str | None:
        """Kill what still runs (its own backlog) and release the copies and the arm.

        Returns:
            None when everything was cleaned up, else a sentence saying what stayed.
        Never raises.
        """
        stayed = [self.backlog.close() if self._owns_backlog else None]
        with self._lock:
            self._closed = True
        left = "; ".join(s for s in stayed if s) or None
        self._arms.close()
        if self._guardian is not None:
            # Everything is cleaned up: the guardian reads EOF, finds nothing, and exits.
            self._guardian.close()
            self._guardian = None
        delete_quietly(self.outputs_root)
        if self._claim is not None:
            os.close(self._claim)
            self._claim = None
        return left

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
