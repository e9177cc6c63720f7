"""The exec tool: one per agent tool instance; the Python API over every arm.

Per command: refuse early (placement, program, shell) -> probe the arm -> sync
the copy -> start -> wait for the window -> result. A refused or failed command
never touches the person's tree: the copy is the only thing written, and it is
ours.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from orchestrator.arm_factory import build_arm, yielders_of
from orchestrator.arms import ArmName
from orchestrator.assurances import statement
from orchestrator.choice import Choice, choose
from orchestrator.config import Config
from orchestrator.copy_sync import FileWork, ScratchCopy
from orchestrator.environment import child_env, env_names
from orchestrator.errors import ErrorCode, SprawlError
from orchestrator.guardian_client import Guardian
from orchestrator.launch import Arm, Launch, NullWatcher, Running, Watcher
from orchestrator.ledger import Ledger
from orchestrator.offerings import Offerings
from orchestrator.results import Confinement, ExecResult, exceptional, read_capped
from orchestrator.shell import container_shell, interpreter_name, require_shell, resolve_shell
from orchestrator.shell import shell_argv as expand_shell
from orchestrator.state import ledger_path, state_dir
from orchestrator.yielding import find_program

Where = Literal["sandbox", "host"]


class ExecTool:
    def __init__(
        self,
        config: Config,
        workdir: Path,
        *,
        offerings: Offerings | None = None,
        environ: Mapping[str, str] | None = None,
        session: str | None = None,
        record: bool = True,
    ) -> None:
        self.config = config
        self.workdir = workdir.resolve()
        self.environ = dict(os.environ if environ is None else environ)
        self.session = session or secrets.token_hex(4)
        self._offerings = offerings
        self._choice: Choice | None = None
        self._arm: Arm | None = None
        self._copy: ScratchCopy | None = None
        self._guardian: Guardian | None = None
        self._counter = itertools.count(1)
        self.state = state_dir(config, self.environ)
        self.outputs_root = self.state / "outputs" / self.session
        self.ledger = Ledger(ledger_path(config, self.environ)) if record else None
        # The first ledger failure, said once on stderr-facing surfaces; never fails a command.
        self.ledger_problem: str | None = None

    # -- choosing -----------------------------------------------------------------
    @property
    def offerings(self) -> Offerings:
        if self._offerings is None:
            engines = self.config.sandbox.arm in ("auto", "container")
            self._offerings = Offerings.this_machine(self.config, with_engines=engines)
        return self._offerings

    @property
    def choice(self) -> Choice:
        if self._choice is None:
            self._choice = choose(
                self.config.sandbox.arm, self.offerings, self.config.sandbox.container.engine
            )
        return self._choice

    def arm(self) -> Arm:
        if self._arm is None:
            self._arm = build_arm(self.choice, self.offerings, self.config)
        return self._arm

    def confinement(self, arm: Arm) -> Confinement:
        notes = [n for n in (arm.note(),) if n]
        if self.choice.missing and arm.name is not ArmName.HOST:
            steps = "; ".join(m.phrase for m in self.choice.missing)
            notes.insert(0, f"Stepped down: {steps}.")
        assurances = arm.assurances()
        return Confinement(
            arm=arm.name.value,
            statement=statement(arm.name.value, assurances, " ".join(notes) or None),
            assurances={a.value: k.value for a, k in assurances.axes().items()},
        )

    # -- running ------------------------------------------------------------------
    def exec(
        self,
        command: Sequence[str] | str,
        *,
        shell: bool = False,
        where: Where = "sandbox",
        timeout: float | None = None,
        run: str = "default",
    ) -> ExecResult:
        started = time.monotonic()
        argv_in = [command] if isinstance(command, str) else list(command)
        if shell and len(argv_in) > 1:
            argv_in = [" ".join(argv_in)]
        arm_name = ArmName.HOST.value if where == "host" else self.choice.arm.value
        fields: dict[str, object] = {"command": argv_in, "shell": shell, "where": where, "run": run}
        try:
            result = self._exec(argv_in, shell, where, timeout, run, started)
        except SprawlError as err:
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
        timeout: float | None,
        run: str,
        started: float,
    ) -> ExecResult:
        if not argv_in or not argv_in[0]:
            raise SprawlError(
                ErrorCode.BAD_REQUEST, "command", "the command is empty",
                "give a program and its arguments, or a shell line with --shell",
            )
        arm = self._arm_for(where)
        env = child_env(self.environ, self.config.sandbox.env_passthrough)
        argv, interpreter = self._argv(arm, argv_in, shell)
        if arm.name is not ArmName.CONTAINER and not shell:
            # Checked against the working directory: the copy will equal it.
            find_program(argv[0], env, str(self.workdir))
        work: FileWork | None = None
        cwd = self.workdir
        arm.prepare(self.workdir)
        watcher: Watcher = NullWatcher()
        if arm.name is not ArmName.HOST:
            watcher = self.guardian()
            copy = self._scratch_copy()
            work = copy.sync(self.workdir)
            cwd = copy.path
        n = next(self._counter)
        outputs = self.outputs_root / str(n)
        launch = Launch(
            argv=tuple(argv), cwd=cwd, env=env, outputs=outputs,
            tag=f"{self.session}-{n}", session=self.session, run=run,
            shell_line=argv_in[0] if shell else None, watcher=watcher,
        )
        running = arm.start(launch)
        window = timeout if timeout is not None else self.config.sandbox.window_seconds
        return self._settle(arm, running, launch, window, work, interpreter, started, argv_in)

    def _settle(
        self, arm: Arm, running: Running, launch: Launch, window: float, work: FileWork | None,
        interpreter: str | None, started: float, argv_in: list[str],
    ) -> ExecResult:
        in_time = running.wait(window)
        if not in_time:
            running.kill()
        finished = running.finish()
        keep = self.state / "kept-output" / launch.tag
        stdout, stdout_full = read_capped(finished.stdout_path, keep)
        stderr, stderr_full = read_capped(finished.stderr_path, keep)
        shutil.rmtree(launch.outputs, ignore_errors=True)
        detail = None if in_time else f"the window of {window:g} s passed; the command was killed"
        container = dict(finished.extra.get("container", {}))  # type: ignore[call-overload]
        return ExecResult(
            outcome="settled",
            arm=arm.name.value,
            where="host" if arm.name is ArmName.HOST else "sandbox",
            command=argv_in,
            shell=launch.shell_line is not None,
            stdout=stdout,
            stderr=stderr,
            stdout_full=stdout_full,
            stderr_full=stderr_full,
            exit_code=finished.exit_code,
            killed=finished.killed,
            detail=detail,
            env=env_names(launch.env),
            interpreter=interpreter,
            confinement=self.confinement(arm),
            work=work,
            container=container or None,
            run=launch.run,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )

    def _arm_for(self, where: Where) -> Arm:
        if where == "host":
            if self.config.sandbox.write_limit == "create":
                raise SprawlError(
                    ErrorCode.SANDBOX_DENIED, 'where = "host"',
                    '[sandbox] write_limit = "create" forbids running in the working directory',
                    'run it in the sandbox (where = "sandbox"), or change write_limit',
                )
            from native_fallbacks.copied_tree import HostArm

            return HostArm(yielders_of(self.offerings))
        return self.arm()

    def _argv(self, arm: Arm, argv_in: list[str], shell: bool) -> tuple[list[str], str | None]:
        if not shell:
            return argv_in, None
        if arm.name is ArmName.CONTAINER:
            found = container_shell()
        else:
            sandbox = self.config.sandbox
            found = require_shell(resolve_shell(sandbox.shell, sandbox.interpreter, self.environ))
        return list(expand_shell(found, argv_in[0])), interpreter_name(found.program)

    def _scratch_copy(self) -> ScratchCopy:
        if self._copy is None:
            scratch = self.offerings.scratch
            if scratch is None:
                raise SprawlError(
                    ErrorCode.STORAGE_FATAL, "scratch directory",
                    self.offerings.scratch_problem or "no scratch directory",
                    "set [sandbox] scratch_dir to a writable directory",
                )
            self._copy = ScratchCopy(scratch, self.session)
            self.guardian().scratch(self._copy.path)
        return self._copy

    def guardian(self) -> Guardian:
        """The session's guardian (SPEC §4), made on the first sandboxed command; its
        process starts with the first announcement. One per exec tool, not per command."""
        if self._guardian is None:
            engines: tuple[str, ...] = ()
            if self.choice.arm is ArmName.CONTAINER:
                engines = (self.choice.engine,) if self.choice.engine else ("docker", "podman")
            self._guardian = Guardian(self.session, engines)
        return self._guardian

    def close(self) -> str | None:
        """Delete the copy and release the arm. Never raises; says what stayed."""
        left = None
        if self._copy is not None:
            left = self._copy.close()
            if left is None and self._guardian is not None:
                self._guardian.scratch_gone(self._copy.path)
            self._copy = None
        if self._arm is not None:
            self._arm.close()
        if self._guardian is not None:
            # Everything is cleaned up: the guardian reads EOF, finds nothing, and exits.
            self._guardian.close()
            self._guardian = None
        shutil.rmtree(self.outputs_root, ignore_errors=True)
        return left

    def __enter__(self) -> ExecTool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
