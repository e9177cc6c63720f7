"""What an exec tool offers over the changes its commands made (ExecTool inherits it): apply
a finished command's kept changes, and the workspaces (changes/workspace.py).

Split out of exec_tool.py (617 lines; the files stay under ~400): exec_tool.py is the story of
one command, this the person's side afterwards; neither calls into the other's half.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sprawl_orch.changes.apply import ApplyResult
from sprawl_orch.changes.apply import apply as apply_changes
from sprawl_orch.changes.workspace import Workspace
from sprawl_orch.config import Config
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.tool.copies import ToolCopies, WorkspaceLease, lease_workspace


class ChangesApi:
    """The apply and workspace methods of ExecTool; the attributes are ExecTool's."""

    config: Config
    workdir: Path
    state: Path
    copies: ToolCopies
    _workspaces: set[str]

    def apply(
        self,
        handle: str,
        paths: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        protected: Sequence[str] = (),
    ) -> ApplyResult:
        """Bring kept changes of a finished command into the working directory (apply.py),
        atomically per file.

        Args:
            handle: the result's ``changes.handle``.
            paths: the changed paths to apply (default: all of them).
            dry_run: write nothing; the result carries the diff.
            protected: protected paths (core/protected.py) a person chose to apply; held
                otherwise. Pass only what a person named -- never an agent's choice;
                anything under `.git` is never applied.

        Returns:
            The ApplyResult: applied, skipped, held (protected) and refused paths (a
            conflict, a link on the way or out of the tree is refused, never written
            through), and the CLI command that applies what was held.

        Raises:
            SprawlError: E_UNKNOWN_HANDLE when nothing is kept under `handle`; E_BAD_REQUEST
            for a `protected` name under .git, not among the changes, or not protected.
        """
        return apply_changes(
            self.state,
            handle,
            paths,
            dry_run=dry_run,
            workdir=self.workdir,
            protected=protected,
            protected_globs=self.config.apply.protected,
            unprotect=self.config.apply.unprotect,
            config_path=self.config.source,
        )

    def _lease_workspace(self, name: str) -> WorkspaceLease:
        """Hold workspace `name` for one command of this tool (tool/copies.py)."""
        try:
            lease = lease_workspace(self.copies, name, name in self._workspaces)
        except SprawlError:
            # Reported gone (its state was deleted): the refusal tells the agent to run
            # again to start afresh, so the next command must not be called gone too.
            if not self.workspace(name).exists():
                self._workspaces.discard(name)
            raise
        self._workspaces.add(name)
        return lease

    def workspace(self, name: str) -> Workspace:
        """Workspace ``name`` of this working directory (changes/workspace.py).

        Args:
            name: the workspace's name (no ``/``, ``..``, control characters or leading dot).

        Returns:
            The Workspace: show, changes, apply, take, discard.

        Raises:
            SprawlError: E_CONFIG_INVALID for a bad name.
        """
        return Workspace(
            self.state,
            self.workdir,
            name,
            self.copies.bounds,
            self.copies.excludes,
            self.copies.guard,
        )

    def discard_workspace(self, name: str) -> None:
        """Drop workspace ``name``; this tool's next command in it starts afresh (it is not
        reported as gone: it was discarded on purpose).

        Args:
            name: the workspace to drop with everything the agent changed in it.

        Returns:
            None.

        Raises:
            SprawlError: E_CONFIG_INVALID for a bad name.
        """
        self.workspace(name).discard()
        self.forget_workspace(name)

    def forget_workspace(self, name: str) -> None:
        """Forget that this tool used workspace ``name`` (a discard made elsewhere, e.g. by
        serve's `workspace_discard`), so its next command is not reported as "gone".

        Args:
            name: the workspace's name.

        Returns:
            None.
        """
        self._workspaces.discard(name)

    def apply_workspace(
        self, name: str, paths: Sequence[str] | None = None, *, dry_run: bool = False
    ) -> ApplyResult:
        """Bring a workspace's changes (all, or ``paths``) into the working directory under
        apply's rules; a named conflict only when chosen by name.

        Args:
            name: the workspace.
            paths: the paths to apply (default: every change that is not a conflict).
            dry_run: only say what would be written, with the diff.

        Returns:
            The ApplyResult: what was applied and what was refused, each with why.

        Raises:
            SprawlError: E_CONFIG_INVALID for a bad name.
        """
        return self.workspace(name).apply(paths, dry_run=dry_run)
