"""The python arm: CPython as a WebAssembly (wasip1) guest under wasmtime (issue 31, design §2).

Its isolation is WebAssembly's own, the same on Linux, macOS and Windows: the guest reaches
the host only through the WASI calls wasmtime implements, and those see two directories --
the command's copy, preopened at the working directory's path, and a private empty /tmp.
The runtime runs in a child process (wasi_guest.py) started like every host command, so the
window, halt and the guardian treat it as any other.

Axes (each shown by tests/integration/test_python_arm.py and the escape suite's python row):
filesystem -- nothing outside the two preopens resolves (`..`, absolute paths and links out
all fail in wasmtime's path resolution); network -- wasip1 has no socket constructor;
process_tree -- no call starts a process; resources -- fuel, the store's memory limit and an
epoch deadline. user is NO: the runtime is sprawl-orch's own child, the caller's uid.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from sprawl_orch.config import PythonConfig
from sprawl_orch.core.arms import ASSURANCES, ArmName
from sprawl_orch.core.assurances import Assurances
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.private import private_dirs
from sprawl_orch.core.removal import delete_quietly
from sprawl_orch.native_fallbacks import (
    wasi_forked,
    wasi_guest,
    wasi_module,
    wasi_prepared,
    wasi_shared,
    wasi_tiering,
)
from sprawl_orch.runs.launch import Finished, Launch, Running
from sprawl_orch.runs.process import HostProcess

PROGRAMS = ("python", "python3", "python3.12")
FORMS = "`python -c CODE [ARGS]` or `python SCRIPT [ARGS]` (a script inside the tree)"


def _other_arm(what: str) -> SprawlError:
    return SprawlError(
        ErrorCode.TOOL_UNAVAILABLE,
        what,
        f"the python arm runs only {FORMS} in its WebAssembly CPython 3.12",
        'run it on an arm that starts programs: [sandbox] arm = "native" (bwrap), '
        '"container" or "auto" (sprawl-orch doctor lists them)',
    )


def check_command(argv: Sequence[str], workdir: Path) -> None:
    """Refuse, before any copy is made, what the guest interpreter cannot run."""
    if not argv or PurePosixPath(argv[0]).name not in PROGRAMS:
        raise _other_arm(argv[0] if argv else "(empty command)")
    if len(argv) < 2:
        raise _other_arm(" ".join(argv))
    if argv[1] == "-c":
        if len(argv) < 3:
            raise _other_arm(" ".join(argv))
        return
    if argv[1].startswith("-"):
        raise _other_arm(f"{argv[0]} {argv[1]}")
    script = Path(os.path.normpath(workdir / argv[1]))
    if not script.is_relative_to(workdir) or script == workdir:
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            argv[1],
            f"the script {argv[1]} is outside the tree {workdir}: the python arm's guest sees "
            "only the tree's copy",
            "put the script in the working directory, or pass its code with python -c",
        )


def venv_sites(copy: Path, workdir: Path) -> list[str]:
    """The guest paths of the tree's virtualenvs' site-packages (`.venv`, `venv`), found in
    the copy: their pure-Python packages import in the guest."""
    found: list[str] = []
    for venv in (".venv", "venv"):
        for site in sorted(copy.glob(f"{venv}/lib/python3*/site-packages")):
            if site.is_dir() and not site.is_symlink():
                found.append(
                    (PurePosixPath(workdir.as_posix()) / site.relative_to(copy)).as_posix()
                )
    return found


class WasiPythonArm:
    name: ArmName = ArmName.PYTHON

    def __init__(self, config: PythonConfig, state: Path) -> None:
        self.config = config
        self.state = state
        self._entry: wasi_module.Compiled | None = None
        self._module: wasi_module.VerifiedModule | None = None
        self._runtime: wasi_forked.Runtime | None = None
        # serve starts commands from many threads: the move to Cranelift's entry (prepare)
        # retires the Winch module and runtime only once no command is starting on them.
        self._lock = threading.Lock()
        self._starting: dict[wasi_module.VerifiedModule, int] = {}
        self._retired: list[tuple[wasi_module.VerifiedModule, wasi_forked.Runtime | None]] = []

    def assurances(self) -> Assurances:
        return ASSURANCES[self.name]

    def note(self) -> str | None:
        return (
            "It runs CPython 3.12 compiled to WebAssembly (wasip1) under wasmtime: the guest "
            "sees only the copy, at the working directory's path, and a private /tmp; its CPU "
            f"is {self.config.fuel} fuel, its memory {self.config.memory_bytes} bytes, its "
            f"wall time {self.config.wall_seconds} s (a command handed to a pre-started "
            f"guest may run up to {wasi_prepared.START_ALLOWANCE} fuel more, less its "
            "interpreter's start). The runtime runs as your uid."
        )

    def prepare(self, workdir: Path) -> None:
        with self._lock:
            self._prepare()

    def _prepare(self) -> None:
        wasi_tiering.reap()
        if self._entry is not None and wasi_module.cached(self.state, self._entry.compiler) is None:
            self._retire()  # its entry removed (a refusal's recovery): chosen, compiled afresh
        # The first command of a binary pays Winch's compile (~1 s quiet) and starts
        # Cranelift's in the background (wasi_tiering.py); later ones map the cache, and the
        # first after Cranelift's entry exists moves to it (a runtime of its compiler).
        if self._entry is not None and self._entry.compiler == wasi_tiering.QUICK:
            optimized = wasi_module.cached(self.state, wasi_tiering.OPTIMIZED)
            if optimized is not None:
                self._retire()
            else:
                wasi_tiering.start_background(self.state)  # a compile that died: again
        if self._entry is None:
            why = wasi_module.missing_why()
            if why is not None:
                raise SprawlError(
                    ErrorCode.TOOL_UNAVAILABLE,
                    '[sandbox] arm = "python"',
                    f"the python arm's runtime is not installed: {why}",
                    wasi_module.INSTALL,
                )
            self._entry = wasi_tiering.choose(self.state)
            # In a call the exec server serves: its runtime and the module state it verified
            # (wasi_shared.py), so the call pays neither the runtime's start nor the hash.
            shared = wasi_shared.lookup(self.state, self._entry)
            self._module = (
                shared.module if shared is not None else wasi_module.VerifiedModule(self._entry)
            )
            if wasi_forked.usable():
                logs = self.state / "wasm-runtime"
                wasi_prepared.sweep(str(logs / "prepared"))  # a killed runtime's leftovers
                self._runtime = wasi_forked.Runtime(self._module, logs, shared)
        assert self._module is not None
        self._module.fd()  # checked before any copy is made; a failed check refuses here
        if self._runtime is not None:
            self._runtime.warm()

    def _retire(self) -> None:
        """Let go of the Winch entry's module and runtime (closed now, or by the last
        command starting on them); its commands still running end on it (wasi_forked: a
        replaced runtime ends once its commands have)."""
        if self._module is not None:
            self._retired.append((self._module, self._runtime))
            self._close_retired()
        self._entry = self._module = self._runtime = None

    def _close_retired(self) -> None:
        for module, runtime in [r for r in self._retired if not self._starting.get(r[0])]:
            self._retired.remove((module, runtime))
            if runtime is not None:
                runtime.close()
            module.close()

    def _started(self, module: wasi_module.VerifiedModule) -> None:
        with self._lock:
            self._starting[module] -= 1
            if not self._starting[module]:
                del self._starting[module]
            self._close_retired()

    def check_command(self, argv: Sequence[str], workdir: Path) -> None:
        check_command(argv, workdir)

    def start(self, launch: Launch) -> Running:
        workdir = launch.workdir or launch.cwd
        check_command(launch.argv, workdir)
        with self._lock:
            self._prepare()
            entry, module, runtime = self._entry, self._module, self._runtime
            assert entry is not None and module is not None
            self._starting[module] = self._starting.get(module, 0) + 1
        try:
            return self._start(launch, workdir, entry, module, runtime)
        finally:
            self._started(module)

    def _start(
        self,
        launch: Launch,
        workdir: Path,
        entry: wasi_module.Compiled,
        module: wasi_module.VerifiedModule,
        runtime: wasi_forked.Runtime | None,
    ) -> Running:
        guest = private_dirs(launch.outputs / "guest")
        tmp = private_dirs(guest / "tmp")
        spec: dict[str, object] = {
            # A script's path as typed (sys.argv[0], as CPython keeps it): the guest starts
            # in the working directory, and its bootstrap makes __file__ from both.
            "argv": list(launch.argv),
            # HOME is the guest's /tmp: the host path the other arms give names nothing here.
            "env": {**dict(launch.env), "HOME": "/tmp"},
            "copy": str(launch.cwd),
            "workdir": workdir.as_posix(),
            "sites": venv_sites(launch.cwd, workdir),
            "tmp": str(tmp),
            "fuel": self.config.fuel,
            "memory_bytes": self.config.memory_bytes,
            "wall_seconds": self.config.wall_seconds,
            "report": str(guest / "report.json"),
            "umask": _umask(),
            "compiler": entry.compiler,  # the engine its module needs
        }
        if runtime is not None:
            # Where the runtime pre-starts the next guest of this key (wasi_prepared.py): its
            # /tmp is moved to the command's, so it is made beside this state's outputs.
            spec["prepare"] = str(private_dirs(self.state / "wasm-runtime" / "prepared"))
            spec["prepare_idle"] = wasi_prepared.IDLE_SECONDS
            forked = wasi_forked.ForkedGuest(runtime, spec, launch)
            return GuestRun(forked, guest, self.config, forked.said, entry.compiler)
        module_fd = module.fd()
        spec["module_fd"] = module_fd
        spec_path = guest / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        # By path: no sprawl_orch import in the child. -I keeps the script's own directory
        # (native_fallbacks/, whose module names could shadow others) off its sys.path and
        # the PYTHON* variables out.
        host = [sys.executable, "-I", wasi_guest.__file__]
        # The runtime's own environment is empty: the guest's is in the spec, and nothing of
        # ours (PYTHONPATH, WASMTIME_*) shapes the runtime.
        process = HostProcess(
            [*host, str(spec_path)],
            guest,
            {},
            launch.outputs,
            join=launch.join,
            watcher=launch.watcher,
            pass_fds=(module_fd,),
        )
        return GuestRun(process, guest, self.config, compiler=entry.compiler)

    def close(self) -> None:
        with self._lock:
            self._starting.clear()  # the tool is closing: nothing starts any more
            self._close_retired()
        if self._runtime is not None:
            if not self._runtime.shared and self._runtime.used:
                wasi_shared.want(self.state)  # the server starts one for the next call
            self._runtime.close()
        if self._module is not None:
            self._module.close()


def _umask() -> int | None:
    """This process's umask, read (Linux) rather than set and set back: other threads make
    files meanwhile. None elsewhere: the runtime keeps its own, inherited from us."""
    with contextlib.suppress(OSError, ValueError, StopIteration):  # no /proc: inherited
        status = Path("/proc/self/status").read_text(encoding="ascii").splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    return None


class GuestRun:
    """The child's `Running`, whose finish reads what ended the guest from its report."""

    def __init__(
        self,
        process: HostProcess | wasi_forked.ForkedGuest,
        guest: Path,
        config: PythonConfig,
        said: str | None = None,
        compiler: str = wasi_tiering.OPTIMIZED,
    ) -> None:
        self._compiler = compiler
        self._process = process
        self._said = said
        self._guest = guest
        self._config = config

    def wait(self, timeout: float | None) -> bool:
        return self._process.wait(timeout)

    def kill(self) -> None:
        self._process.kill()

    def pids(self) -> list[int]:
        return self._process.pids()

    def finish(self) -> Finished:
        done = self._process.finish()
        report: dict[str, object] = {}
        # absent when the runtime was killed (window, halt) or died: said below
        with contextlib.suppress(OSError, ValueError):
            report = json.loads((self._guest / "report.json").read_text(encoding="utf-8"))
        limit = report.get("limit")
        info = {
            "fuel": self._config.fuel,
            "memory_bytes": self._config.memory_bytes,
            "wall_seconds": self._config.wall_seconds,
            # the entry's compiler; the guest's report says the engine's own when it ran
            "compiler": self._compiler,
            **report,
            "prepared": bool(report.get("prepared")),
        }
        if not report and not done.killed:
            info["runtime_failed"] = f"the wasmtime runtime ended with status {done.exit_code}"
        if self._said:
            info["runtime_restarted"] = self._said
        exit_code = done.exit_code
        if exit_code is None and isinstance(report.get("exit_code"), int):
            # its runtime process was replaced while it ran: its status went to init
            exit_code = int(str(report["exit_code"]))
        delete_quietly(self._guest)  # the one tree removal (core/removal.py): never follows a link
        return Finished(
            exit_code=exit_code,
            stdout_path=done.stdout_path,
            stderr_path=done.stderr_path,
            killed=done.killed,
            limits_hit=(str(limit),) if limit else (),
            extra={"python": info},
        )
