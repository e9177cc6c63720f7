"""Which OCI runtime every container runs under: `[sandbox.container] runtime` (design §3.1).

- unset: the engine's default; when it fails the probe and another installed runtime
  (runc, crun) passes, that one, said in the admission's notes;
- "auto": gVisor's runsc when it is there for this engine and passes the probe, else as
  unset -- and the notes say why runsc was not used;
- "runc" / "crun" / "runsc": that runtime or no admission at all (E_SANDBOX_DENIED
  naming what to install or register), never a silent other one.

"There for this engine": docker runs only runtimes registered with its daemon (`docker
info` Runtimes; .ci/setup-engines registers runsc with runtimeArgs --network=none and
--oci-seccomp -- a registration without the latter is refused: gVisor would not load the
seccomp profile the network claim rests on, seccomp_profile.py);
podman is given runc/crun by name and runsc as the path of the wrapper gvisor.py writes
(bare runsc refuses podman's `--network none`: "cannot run with network enabled in root
network namespace"). Warm mode (one container entered by exec per command) is not proved
on runsc: "auto" skips it there and an explicit "runsc" is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sprawl_orch.container.admission_words import runsc_failure
from sprawl_orch.container.gvisor import OCI_SECCOMP, RUNSC, ensure_wrapper, runsc_path
from sprawl_orch.container.probe_container import Runtime
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.core.host_which import host_which
from sprawl_orch.engines.engine import EngineFacts

# runc first: it works everywhere here (crun fails on hybrid cgroup hosts)
BY_NAME: tuple[str, ...] = ("runc", "crun")
REGISTER_RUNSC = (
    "install runsc (apt-get install runsc) and register it with the daemon in its "
    'daemon.json: {"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": '
    '["--network=none", "--oci-seccomp"]}}}, then `kill -HUP` dockerd (it reloads runtimes '
    "without a restart)"
)

Probe = Callable[[Runtime], str | None]  # None = passed, else the engine's words


class NoRuntime(Exception):
    """The asked runtime is not there: the engine is not admitted."""

    def __init__(self, code: ErrorCode, reason: str, recovery: str) -> None:
        super().__init__(reason)
        self.code, self.reason, self.recovery = code, reason, recovery


def find(engine: str, facts: EngineFacts, name: str, wrappers: Path) -> Runtime | str:
    """`name` as this engine would run it, or why it can't (the sentence ends in a fix)."""
    if engine == "podman" and name == RUNSC:
        runsc = runsc_path()
        if runsc is None:
            return "runsc is not installed (apt-get install runsc)"
        try:
            wrapper = str(ensure_wrapper(wrappers, runsc))
        except OSError as err:
            return f"the runsc wrapper could not be written in {wrappers}: {err}"
        return Runtime(RUNSC, wrapper, wrapper, gvisor=True)
    if name in facts.runtimes:
        if name == RUNSC and engine == "docker" and (why := _not_runsc(facts)):
            return why
        return Runtime(name, name, name, gvisor=name == RUNSC)
    if engine == "docker":
        known = ", ".join(facts.runtimes) or "none"
        fix = (
            REGISTER_RUNSC
            if name == RUNSC
            else (f'install {name} and register it in daemon.json "runtimes"')
        )
        return f"{name} is not registered with the docker daemon (it has: {known}); {fix}"
    return f"{name} is not installed (apt-get install {name})"


def _not_runsc(facts: EngineFacts) -> str | None:
    """The daemon's runtime named "runsc" must run gVisor's runsc binary: a name alone
    would let any runtime registered under it be stated as gVisor's kernel."""
    path = dict(facts.runtime_paths).get(RUNSC, "")
    found = host_which(path) if path else None
    args = dict(facts.runtime_args).get(RUNSC, "").split()
    if found is not None and Path(found).resolve().name == RUNSC:
        if OCI_SECCOMP in args or f"{OCI_SECCOMP}=true" in args:
            return None
        return (
            f"the docker daemon runs runsc without {OCI_SECCOMP} (runtimeArgs: "
            f"{' '.join(args) or 'none'}): gVisor would not load sprawl-orch's seccomp "
            f"profile, and the network axis rests on it; {REGISTER_RUNSC}"
        )
    return (
        f"the docker daemon's runtime named runsc runs {path or 'an unknown program'!r}, "
        f"not gVisor's runsc binary; {REGISTER_RUNSC}"
    )


def _engine_default(facts: EngineFacts, probe: Probe) -> tuple[Runtime, tuple[str, ...]] | str:
    """The engine's default runtime, else the first other by-name runtime that passes."""
    default = Runtime.default(facts.default_runtime)
    first = probe(default)
    if first is None:
        return default, ()
    others = [r for r in facts.runtimes if r != facts.default_runtime and r in BY_NAME]
    for other in sorted(others, key=BY_NAME.index):
        if probe(Runtime(other, other, other)) is None:
            return Runtime(other, other, other), (
                f"the default runtime {facts.default_runtime} failed the probe ({first}); "
                f"{other} passed it, so every container runs with --runtime {other}",
            )
    return first


def choose(
    engine: str,
    facts: EngineFacts,
    asked: str | None,
    wrappers: Path,
    probe: Probe,
    *,
    warm: bool = False,
    userns: bool = False,
) -> tuple[Runtime, tuple[str, ...]] | str:
    """(the runtime, what to say) -- or the failing probe's words (the caller explains
    them): the asked runtime's, else the engine's default's. Raises NoRuntime when an
    explicitly asked runtime is not there."""
    if asked is None:
        return _engine_default(facts, probe)
    if asked != "auto":
        found = find(engine, facts, asked, wrappers)
        if isinstance(found, str):
            raise NoRuntime(
                ErrorCode.SANDBOX_DENIED,
                f'[sandbox.container] runtime = "{asked}", but {found}',
                'fix that, or set runtime = "auto" (runsc where it works, else '
                "the engine's default)",
            )
        if found.gvisor and warm:
            raise NoRuntime(
                ErrorCode.CONFIG_INVALID,
                'runtime = "runsc" with warm = true: warm mode (one container '
                "entered by exec per command) is not proved on gVisor",
                "set warm = false, or another runtime",
            )
        words = probe(found)
        return (found, ()) if words is None else words
    said: str
    found = find(engine, facts, RUNSC, wrappers)
    if warm:
        said = "runsc not used: warm mode is not proved on gVisor"
    elif isinstance(found, str):
        said = f"runsc not used: {found}"
    else:
        words = probe(found)
        if words is None:
            return found, ()
        said = runsc_failure(words, userns)
    fallback = _engine_default(facts, probe)
    if isinstance(fallback, str):
        return fallback
    return fallback[0], (said, *fallback[1])
