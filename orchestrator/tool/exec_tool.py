"""The exec tool: one per agent tool instance; the Python API over every arm.

Per command: refuse early (placement, program, shell) -> probe the arm -> sync
the copy -> start -> wait for the window -> result. A refused or failed command
never touches the person's tree: the copy is the only thing written, and it is
ours.

A command still running when its window passes is handed to the backlog
(backlog.py) and keeps its own copy until it is collected; the next command
leases a free copy slot (copy_store: persistent, per working directory and
config, resynced rather than rebuilt, kept between CLI calls; design §5). With
`background_ok=False` it is killed at the window instead (the CLI: a process
that exits can keep no backlog).

This module is the story of one command; what it leans on lives beside it: the
arm chosen and built once (tool_arm.py), the copies (tool_copies.py), the
commands past their window (backlog.py), the guardian (guardian_client.py).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, Literal

from sprawl_orch.changes.changes import Changes
from sprawl_orch.changes.workspace import check_name
from sprawl_orch.config import Config, load_config, with_warm
from sprawl_orch.config.secrets import refuse_files_in_tree
from sprawl_orch.config.state import ledger_path, refuse_state_in_tree, state_dir
from sprawl_orch.container.evidence import Evidence
from sprawl_orch.copy.store import Lease
from sprawl_orch.copy.sync import FileWork
from sprawl_orch.copy.walk import Progress
from sprawl_orch.copy.writers import note_before as note_writers
from sprawl_orch.core import served_warm
from sprawl_orch.core.arg_bounds import check_arguments
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.command_input import CommandInput
from sprawl_orch.core.environment import child_env, with_home
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.private import prepare_state
from sprawl_orch.runs.backlog import Backlog, Pending
from sprawl_orch.runs.guardian_client import Guardian
from sprawl_orch.runs.launch import Arm, Launch, NullWatcher, Watcher
from sprawl_orch.runs.ledger import Ledger
from sprawl_orch.runs.output_keep import keeping
from sprawl_orch.runs.results import Confinement, ExecResult, exceptional
from sprawl_orch.runs.shares import UNSET, Shares
from sprawl_orch.runs.yielding import find_program
from sprawl_orch.secrets.plan import with_secrets
from sprawl_orch.selection.choice import Choice
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.arm import ToolArm
from sprawl_orch.tool.backlog_api import BacklogApi
from sprawl_orch.tool.changes_api import ChangesApi
from sprawl_orch.tool.command import (
    capped_streams,
    command_argv,
    shell_argv,
    streams_done,
    window_of,
)
from sprawl_orch.tool.copies import ToolCopies, WorkspaceLease, releaser, workspace_changes
from sprawl_orch.tool.lifetime_api import LifetimeApi
from sprawl_orch.tool.stream import Follower

Where = Literal["sandbox", "host"]


class ExecTool(ChangesApi, BacklogApi, LifetimeApi):
    """Runs commands confined in copies of `workdir` and says what held for each.

    Use it as a context manager: `close()` kills what still runs and releases its copies
    (kept for the next call: copy/store.py).

    Example:
        ```python
        from sprawl_orch import ExecTool

        with ExecTool(".") as tool:  # ./sprawl.toml (or the defaults); commands run in a copy of .
            result = tool.exec(["ls", "-a"])
            print(result.outcome, result.exit_code, result.statement)
        ```
    """

    def __init__(
        self,
        config: Config | str | Path | None = None,
        workdir: Path | str | None = None,
        *,
        offerings: Offerings | None = None,
        environ: Mapping[str, str] | None = None,
        session: str | None = None,
        record: bool = True,
        shares: Shares = UNSET,
        backlog: Backlog | None = None,
        shared_guardian: bool = False,
        progress: Progress | None = None,
        warm: bool | None = None,
    ) -> None:
        """An exec tool over one working directory; nothing is probed or started yet.

        Args:
            config: a Config; or a path: a sprawl.toml, or a directory whose sprawl.toml is
                read (``load_config``); None reads `workdir`'s sprawl.toml, as the CLI's
                ``-C DIR`` does. Absent files mean the defaults.
            workdir: the person's tree the commands run in a copy of. Default: the directory
                `config` names (the file's own directory), else the current directory.
            offerings: the machine as already sampled (tests, serve); default: sampled on
                the first command.
            environ: the environment the child's is built from (default: os.environ).
            session: this tool's id in names and labels (default: random).
            record: append one ledger line per result.
            shares: what each run gets (runs/cgroups.py).
            backlog: share one with other tools (serve does, one tool per arm), which then
                own and close it.
            shared_guardian: connect to the state directory's one guardian instead of
                spawning one for this tool -- for a process that lives for one call (the
                CLI); a long-lived one (serve, mcp, a library user) pays its own once.
            progress: hears (files, bytes) during a long sync (the CLI draws it).
            warm: overrides ``[sandbox.container] warm`` (container/warm.py).

        Raises:
            SprawlError: E_CONFIG_INVALID when the config can't be read or is refused.
        """
        if workdir is None:
            named = None if config is None or isinstance(config, Config) else Path(config)
            workdir = Path.cwd() if named is None else named if named.is_dir() else named.parent
        workdir = Path(workdir)
        if config is None:
            config = load_config(cwd=workdir)
        elif not isinstance(config, Config):
            config = load_config(config)
        if warm is not None:
            config = with_warm(config, warm)
        self.config = config
        self.shared_guardian = shared_guardian
        self.workdir = workdir.resolve()
        self.environ = dict(os.environ if environ is None else environ)
        self.session = session or (backlog.session if backlog else secrets.token_hex(4))
        # Guards the lazy choice/arm and the guardian: serve calls exec from many threads.
        self._lock = threading.RLock()
        self._closed = False
        self.progress = progress
        self._guardian: Guardian | None = None
        # Before prepare_state: a refusal writes nothing into the tree (raised to the caller).
        refuse_state_in_tree(self.workdir, config, self.environ)
        refuse_files_in_tree(config.sandbox.secrets, self.workdir)
        self.state = prepare_state(state_dir(config, self.environ))
        self.evidence = Evidence(self.state / "admission")
        self._arms = ToolArm(
            config, self.environ, self.evidence, self.guardian, self._lock, offerings
        )
        self._owns_backlog = backlog is None
        self.backlog = backlog or Backlog(self.session, shares, keeping=keeping(config, self.state))
        self.backlog.watch_with(self.guardian)
        self.outputs_root = self.state / "outputs" / self.session
        self._claim: int | None = None  # output_keep.claim's fd, taken at the first command
        self.copies = ToolCopies(config, self.workdir, self.state, self.environ.get("HOME"))
        self._workspaces: set[str] = set()  # ran a command in: a missing one is gone
        self.ledger = (
            Ledger(ledger_path(config, self.environ), config.state.ledger_budget_bytes)
            if record
            else None
        )
        # The first ledger failure; never fails a command. (No surface prints it yet.)
        self.ledger_problem: str | None = None

    # -- choosing (tool_arm.py) ------------------------------------------------------
    @property
    def offerings(self) -> Offerings:
        """The machine as sampled once for this tool: engines, mechanisms, their faults."""
        return self._arms.offerings

    @property
    def choice(self) -> Choice:
        """Which arm sandboxed commands run on, and why (made on first use)."""
        return self._arms.choice

    def arm(self) -> Arm:
        """The arm sandboxed commands run on, chosen and built on first use.

        Returns:
            The chosen arm (selection/arm_factory.py).

        Raises:
            SprawlError: E_SANDBOX_DENIED when no arm can give what the config asks.
        """
        return self._arms.arm()

    def confinement(self, arm: Arm) -> Confinement:
        """What `arm` holds, as every result of it carries it.

        Args:
            arm: an arm of this tool (`arm()`).

        Returns:
            Its name, its statement and each guarantee's state.
        """
        return self._arms.confinement(arm)

    # -- running ------------------------------------------------------------------
    def exec(
        self,
        command: Sequence[str] | str,
        *,
        shell: bool = False,
        where: Where = "sandbox",
        window: float | None = None,
        run: str = "default",
        background_ok: bool = True,
        follow: tuple[BinaryIO, BinaryIO] | None = None,
        timeout: float | None = None,
        workspace: str | None = None,
        given: CommandInput | None = None,
    ) -> ExecResult:
        """Run one command confined; a refusal or failure is a result too, never a raise.

        Args:
            command: a list (program and arguments), or with ``shell=True`` one shell line
                (str) -- or a list, quoted word for word into one line.
            shell: run under the configured shell (``[sandbox] shell``/``interpreter``).
            where: "sandbox" (the chosen arm) or "host" (in place, no guarantees).
            window: seconds to wait (default ``[sandbox] window_seconds``). A command still
                running then is NOT killed: it moves to the background (``backgrounded``,
                with a ``handle`` for `halt`; its result comes from `harvest`), unless
                `background_ok` is False. The CLI's ``--timeout`` is that kill.
            run: the agent session the command belongs to (its cgroup, `release`).
            background_ok: False kills the command at the window instead (``killed``).
            follow: binary (stdout, stderr) sinks that get the command's bytes live.
            timeout: the old name of `window` (it moves to the background, it does not kill
                as ``subprocess.run``'s does); deprecated, warns.
            workspace: run it in that workspace (changes/workspace.py) -- the agent's
                earlier changes are there, the person's edits flowed in -- instead of a copy
                reset to the working directory.
            given: what the command reads (core/command_input.py: ``-i`` a pipe from a
                descriptor of yours, ``-t`` a new terminal); default: /dev/null. The tool
                feeds it while the command runs and closes it at the end.

        Returns:
            The ExecResult: ``settled`` (exit code, output, changes), ``backgrounded``
            (a handle) or ``exceptional`` (code, subject, detail, recovery).

        Raises:
            TypeError: a str command without ``shell=True``, or a list of non-str items.
            (A bad workspace name or ``where="host"`` with a workspace is a refusal result.)
        """
        window = window_of(window, timeout)
        started = time.monotonic()
        argv_in = command_argv(command, shell, self.config.sandbox.interpreter)
        arm_name = ArmName.HOST.value if where == "host" else self.choice.arm.value
        fields: dict[str, object] = {"command": argv_in, "shell": shell, "where": where, "run": run}
        try:
            if workspace is not None:
                check_name(workspace)
                if where == "host":
                    raise SprawlError(
                        ErrorCode.BAD_REQUEST,
                        "where",
                        "a workspace is a copy; --where host runs in the working directory",
                        "drop --where host, or drop --workspace",
                    )
            result = self._exec(
                argv_in, shell, where, window, run, started, background_ok, follow, workspace, given
            )
        except SprawlError as err:
            if given is not None:
                given.close()
            result = exceptional(arm_name, err, **fields)
        self._record(result)
        return result

    def _record(self, result: ExecResult) -> None:
        if self.ledger is None:
            return
        try:
            self.ledger.append(result.as_json_dict())
        except SprawlError as err:
            self.ledger_problem = self.ledger_problem or str(err)

    def _exec(
        self,
        argv_in: list[str],
        shell: bool,
        where: Where,
        window: float | None,
        run: str,
        started: float,
        background_ok: bool,
        follow: tuple[BinaryIO, BinaryIO] | None = None,
        workspace: str | None = None,
        given: CommandInput | None = None,
    ) -> ExecResult:
        if not argv_in or not argv_in[0]:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                "command",
                "the command is empty",
                "give a program and its arguments, or a shell line with --shell",
            )
        self.backlog.check_open()
        arm = self._arms.for_where(where)
        egress = self._arms.egress_for(arm)
        sandbox = self.config.sandbox
        env = child_env(self.environ, (*sandbox.env_passthrough, *sandbox.credentials))
        argv, interpreter = shell_argv(self.config, self.environ, arm, argv_in, shell)
        check_arguments(argv, env)
        check_command = getattr(arm, "check_command", None)
        if check_command is not None:
            # The python arm runs no host program: its own forms, checked before any copy.
            check_command(argv, self.workdir)
        elif arm.name is not ArmName.CONTAINER and not shell:
            # Checked against the working directory: the copy will equal it.
            find_program(argv[0], env, str(self.workdir))
        work: FileWork | None = None
        cwd = self.workdir
        arm.prepare(self.workdir)
        note_writers(self.copies.state, arm.name, arm.assurances())  # before it starts (§5.1)
        watcher: Watcher = NullWatcher()
        copy: Lease | WorkspaceLease | None = None
        changes: Callable[[str], Changes] | None = None
        if arm.name is not ArmName.HOST and workspace is not None:
            watcher = self.guardian()
            copy = self._lease_workspace(workspace)
            cwd = copy.path
            ready = getattr(arm, "ready_copy", None)
            if ready is not None:
                ready(copy.path)
            changes = workspace_changes(copy)
        elif arm.name is not ArmName.HOST:
            watcher = self.guardian()
            copy, work = self.copies.lease(self.progress)
            cwd = copy.path
            changes = self.copies.changes_hook(arm, copy)
        try:
            self._claim_outputs()
            join = self.backlog.joining(run)
            n = self.backlog.number()
            outputs = self.outputs_root / str(n)
            if arm.name is not ArmName.HOST or "HOME" not in env:
                env = with_home(env, arm.name, outputs)
            if egress is not None and self._arms.secrets:
                egress, placeholders = with_secrets(
                    egress, self._arms.secrets, outputs, self.environ, self._arms.image_trust(arm)
                )
                env = {**env, **placeholders}
            if egress is not None:
                env = {**env, **egress.env()}
            launch = Launch(
                argv=tuple(argv),
                cwd=cwd,
                env=env,
                outputs=outputs,
                tag=f"{self.session}-{n}",
                session=self.session,
                run=run,
                shell_line=argv_in[0] if shell else None,
                watcher=watcher,
                join=join,
                workdir=self.workdir,
                egress=egress,
                given=given,
            )
            streams = capped_streams(self.config, outputs, follow)
            try:
                if given is not None:
                    given.into(outputs / "stdout")  # a writer before the pump counts them
                if arm.name != ArmName.CONTAINER:  # it keeps or lets go in container/arm.py
                    served_warm.keep_only(None)  # inherited owners: core/served_warm.py
                running = arm.start(launch)
            except BaseException:
                if given is not None:
                    given.close()
                if streams is not None:
                    streams.stop(0.0)
                raise
            if given is not None:
                given.start()
            if streams is not None:
                streams.started()
        except BaseException:
            undo = releaser(self.copies, copy)
            if undo is not None:
                undo()
            raise
        if window is None:
            window = self.config.sandbox.window_seconds
        pending = Pending(
            arm.name, argv_in, interpreter, self._arms.confinement(arm), work, window, started
        )
        release_copy = releaser(self.copies, copy)
        drain: Callable[[], None] | None = None
        if follow is not None:
            # With pipes the pump shows every byte itself (the file holds only the cap);
            # `drain` still marks the output as shown, so none is kept for the result.
            drain = (lambda: None) if streams is not None else Follower(outputs, *follow).drain
        entry = self.backlog.enter(
            running,
            launch,
            pending,
            join,
            release_copy,
            changes,
            drain,
            streams_done=streams_done(streams, given),
        )
        return self.backlog.settle(entry, running.wait(window), background_ok)
