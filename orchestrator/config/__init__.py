"""`sprawl.toml`: parsed once into pydantic models, refused with E_CONFIG_INVALID.

Every refusal names the key, the value found and the accepted spellings, so the
person can fix the file without reading this code.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sprawl_orch.copy.bounds import MAX_BYTES, MAX_DEPTH, MAX_FILES, compile_excludes
from sprawl_orch.core.credentials import credential_pattern, why
from sprawl_orch.core.errors import ConfigError, ErrorCode, SprawlError, os_errors
from sprawl_orch.egress.rules import parse_entry
from sprawl_orch.engines.engine import IMAGE_ID, EngineName

CONFIG_NAME = "sprawl.toml"
# Defaults of [state] output_keep_bytes / output_budget_bytes (runs/output_keep.py).
KEEP_BYTES = 16 * 1024 * 1024
BUDGET_BYTES = 256 * 1024 * 1024
LEDGER_BUDGET_BYTES = 64 * 1024 * 1024

ArmSpelling = Literal["auto", "container", "native", "copied_tree", "none", "python"]
ARM_SPELLINGS: tuple[str, ...] = ("auto", "container", "native", "copied_tree", "none", "python")

DEFAULT_BUDGET = 2 * 1024**3  # 8 copies at MAX_BYTES; each call's own copy is never evicted


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_TAKE_DEFAULT = "or remove it to take the default"


class _Refusal(ValueError):
    """A refused value whose fix is not "remove it to take the default" (_refused)."""

    def __init__(self, msg: str, recovery: str) -> None:
        super().__init__(msg)
        self.recovery = recovery


def _image_id(value: str | None) -> str | None:
    if value is not None and not IMAGE_ID.match(value):
        # Issue 27: the recovery said "remove it to take the default", and there is no
        # default image; the command that fixes it was only in the detail.
        raise _Refusal(
            f"{value!r} is not a fixed image ID (sha256:<64 hex>); tags and short IDs are "
            "refused because a tag can move",
            f"resolve it locally and write its ID in its place: sprawl-orch image pin {value}",
        )
    return value


class _Strict(BaseModel):
    """Every section: unknown keys refused, frozen. Built directly (``Config(sandbox=...)``,
    ``SandboxConfig(arm=...)``) a bad value raises the same E_CONFIG_INVALID as a bad file
    does, never pydantic's own ValidationError: the public face has one way to say "bad
    config" (issue 28)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Where the section sits in sprawl.toml, so a refusal names the key as the file spells it.
    _AT: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise _explain(err, None, self._AT) from err


class EngineImages(_Strict):
    """Per-engine pins: the same rootfs imported into docker and podman gets two IDs."""

    _AT = ("sandbox", "container", "images")

    docker: str | None = None
    podman: str | None = None

    @field_validator("docker", "podman")
    @classmethod
    def _fixed(cls, value: str | None) -> str | None:
        return _image_id(value)


def warm_user_problem(container: ContainerConfig) -> str | None:
    """Why warm mode can't keep its per-command guarantees for this command user, or None.
    A warm container's idle init runs as the container's uid 0 (container/warm.py): a
    command as uid 0 could ptrace or signal it and write root's own places of the container
    (the escape suite found a file a first command left in /dev read by the next one)."""
    if not container.warm or int(container.user.split(":")[0]) != 0:
        return None
    return (
        "warm mode needs a command user other than uid 0: a warm container's idle init "
        "runs as uid 0, so a command as uid 0 could ptrace or signal it and write "
        "root's places of the container (/dev), left there for the next command"
    )


class ContainerConfig(_Strict):
    _AT = ("sandbox", "container")
    engine: Literal["auto", EngineName] = "auto"
    image: str | None = None
    images: EngineImages = EngineImages()
    memory_bytes: int = Field(default=512 * 1024 * 1024, ge=6 * 1024 * 1024)
    cpus: float = Field(default=1.0, gt=0, le=1024)
    pids: int = Field(default=256, ge=8, le=4_194_304)
    user: str = "65534:65534"
    # Podman 4.3's default rlimits exceed these hosts' hard limits ("setrlimit
    # RLIMIT_NOFILE: Operation not permitted"), so we always pass explicit ones.
    ulimits: dict[str, str] = Field(
        default_factory=lambda: {"nofile": "1024:1024", "nproc": "1024:1024"}
    )
    cpu_shares: int = Field(default=512, ge=2, le=262_144)
    # "auto": a user namespace wherever the engine can give one (podman --userns=auto,
    # proved by admission's probe; docker/rootless engines as they are), and engine =
    # "auto" prefers an engine that keeps the user axis; "required": an engine without
    # one is not admitted; "off": podman runs without one (docker/rootless can't opt out).
    userns: Literal["auto", "required", "off"] = "auto"
    # The OCI runtime (container/runtimes.py): unset = the engine's default (runc here, with
    # a fallback that passes the probe); "auto" = gVisor's runsc where it is installed (podman)
    # or registered (docker) and passes admission's probe, else as unset; a name = that
    # runtime or no admission. Not "auto" by default yet: under runsc an OOM kill is not
    # reported by podman and process limits are counted differently (gvisor.py).
    runtime: Literal["auto", "runc", "crun", "runsc"] | None = None
    # One kept container per exec tool and run, each command entered with an exec, every
    # fresh-container guarantee re-established between commands (container/warm.py).
    warm: bool = False
    # The docker daemon to use (unset: $DOCKER_HOST, else the default socket), e.g. a second
    # dockerd started with --userns-remap, whose containers keep the user axis. Admission,
    # the arm and the guardian all reach this one daemon.
    docker_host: str | None = None

    @field_validator("image")
    @classmethod
    def _fixed(cls, value: str | None) -> str | None:
        return _image_id(value)

    @field_validator("docker_host")
    @classmethod
    def _docker_host(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if re.fullmatch(r"unix:///[^\x00]*[^/\x00]", value) or re.fullmatch(
            r"(tcp|ssh)://[^\s/]+(:[0-9]{1,5})?/?", value
        ):
            return value
        raise ValueError(
            f"{value!r} is not a docker host: unix:///absolute/path/to/docker.sock, "
            "tcp://HOST:PORT or ssh://[USER@]HOST (the forms of DOCKER_HOST)"
        )

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9]+(:[0-9]+)?", value):
            raise ValueError(
                f"{value!r} must be a numeric uid or uid:gid (names resolve inside the image "
                "and can't be verified by inspect)"
            )
        return value

    @field_validator("ulimits")
    @classmethod
    def _ulimits(cls, value: dict[str, str]) -> dict[str, str]:
        for name, limit in value.items():
            if not re.fullmatch(r"[a-z]+", name) or not re.fullmatch(r"[0-9]+(:[0-9]+)?", limit):
                raise ValueError(f'ulimit {name}={limit!r} must look like nofile = "1024:1024"')
        return value

    @model_validator(mode="after")
    def _warm_user(self) -> ContainerConfig:
        problem = warm_user_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    def image_for(self, engine: str) -> str | None:
        pinned = getattr(self.images, engine, None)
        return pinned if isinstance(pinned, str) else self.image


class CopyConfig(_Strict):
    """``[sandbox.copy]``: the synced copy's bounds, excludes and disk budget (design §5)."""

    _AT = ("sandbox", "copy")

    max_files: int = Field(default=MAX_FILES, ge=1)
    max_bytes: int = Field(default=MAX_BYTES, ge=1)
    max_depth: int = Field(default=MAX_DEPTH, ge=1, le=10_000)
    exclude: tuple[str, ...] = ()
    # Persistent copies kept in the state directory, all working directories together.
    budget_bytes: int = Field(default=DEFAULT_BUDGET, ge=0)

    @field_validator("exclude")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if value:
            compile_excludes(value)
        return value


class NetworkConfig(_Strict):
    """``[sandbox.network]``: hosts a command may reach over HTTP(S) through sprawl-orch's
    proxy (orchestrator/egress/). Empty `allow` (the default): no network at all."""

    _AT = ("sandbox", "network")

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    # "host": the host's CA bundle (SSL_CERT_FILE and siblings) made visible read-only inside
    # and the same variables set, for machines whose outbound TLS is re-signed by a CA only
    # the host trusts. "image": the sandbox's own trust store.
    trust: Literal["image", "host"] = "image"

    @field_validator("allow", "deny")
    @classmethod
    def _entries(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            parse_entry(entry)  # EntryError (a ValueError) names the entry and the fault
        return entries


class PythonConfig(_Strict):
    """``[sandbox.python]``: the limits of the python arm's WebAssembly guest (issue 31);
    each a whole number > 0 (strict: 1.5, "10" and true are refused, never rounded)."""

    _AT = ("sandbox", "python")

    # wasmtime charges one unit of fuel per WebAssembly operator; on this project's 2-core
    # machine CPython's guest burned ~7.5e9 a second (benchmarks/python_arm.py prints the
    # rate here): the default is about a minute of CPU.
    fuel: int = Field(default=400_000_000_000, gt=0, strict=True)
    # The guest's linear memory; CPython needs ~10 MiB to start, wasm32 stops at 4 GiB.
    memory_bytes: int = Field(
        default=512 * 1024 * 1024, ge=16 * 1024 * 1024, le=4 * 1024**3, strict=True
    )
    # Epoch interruption: the guest traps this long after it started, whatever it runs.
    wall_seconds: int = Field(default=600, gt=0, le=7 * 24 * 3600, strict=True)


class SandboxConfig(_Strict):
    _AT = ("sandbox",)
    arm: ArmSpelling = "auto"
    shell: bool = True
    interpreter: Literal["system", "pwsh"] = "system"
    env_passthrough: tuple[str, ...] = ()
    # Credential-shaped names passed on purpose; every result's statement names them.
    credentials: tuple[str, ...] = ()
    write_limit: Literal["none", "create"] = "none"
    scratch_dir: Path | None = None
    # inf passed pydantic's gt=0 and reached the window (issue 30): a finite number only.
    window_seconds: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    container: ContainerConfig = ContainerConfig()
    copy_: CopyConfig = Field(default=CopyConfig(), alias="copy")
    network: NetworkConfig = NetworkConfig()
    python: PythonConfig = PythonConfig()

    @field_validator("env_passthrough", "credentials")
    @classmethod
    def _names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return names

    @field_validator("env_passthrough")
    @classmethod
    def _no_credentials(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            pattern = credential_pattern(name)
            if pattern is not None:
                raise ValueError(
                    f"{name!r} looks like a credential (matches {pattern}: {why(pattern)}); "
                    "env_passthrough never passes one into a sandbox. If the commands really "
                    f'need it, move it to [sandbox] credentials = ["{name}"]: it is then '
                    "passed, and every result says so"
                )
        return names


class StateConfig(_Strict):
    _AT = ("state",)
    dir: Path | None = None
    ledger: Path | None = None
    # Kept changes of finished commands (change_store.py), dropped oldest first past this.
    changes_budget_bytes: int = Field(default=1024 * 1024 * 1024, ge=0)
    # A long stream's full text kept as the way back (output_keep.py): at most this many
    # bytes per stream of a command, and this much in kept-output/, oldest dropped first.
    output_keep_bytes: int = Field(default=KEEP_BYTES, ge=0)
    output_budget_bytes: int = Field(default=BUDGET_BYTES, ge=0)
    # The ledger (runs/ledger.py) and its one rotated file together: a line holds up to
    # 64 KiB of each stream, so it grew without end before (issue 30, host disk).
    ledger_budget_bytes: int = Field(default=LEDGER_BUDGET_BYTES, ge=1024 * 1024)


class ApplyConfig(_Strict):
    """``[apply]``: what `apply` holds back besides the protected-path table (protected.py)."""

    # gitignore-style globs protected on top of the table
    protected: tuple[str, ...] = ()
    # default rows removed, each by its name in the table (`.git` never)
    unprotect: tuple[str, ...] = ()

    @field_validator("protected")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if value:
            compile_excludes(value)
        return value

    @field_validator("unprotect")
    @classmethod
    def _rows(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from sprawl_orch.core.protected import GIT_DIR, ROWS, unknown_rows

        if GIT_DIR in value:
            raise ValueError(
                "`.git` is never applied (its hooks and config run on the next git command); "
                "it cannot be unprotected"
            )
        unknown = unknown_rows(value)
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))}: no such row of the protected-path table; "
                f"names: {', '.join(n for n in ROWS if n != GIT_DIR)}"
            )
        return value


class Config(_Strict):
    """A parsed `sprawl.toml` (frozen); every key is optional.

    Read one with `load_config`, parse TOML data with `parse_config`, or build one directly:
    all three refuse a bad value the same way.

    Args:
        sandbox: the ``[sandbox]`` table (a SandboxConfig or a dict of its keys).
        state: the ``[state]`` table (a StateConfig or a dict of its keys).

    Raises:
        SprawlError: E_CONFIG_INVALID naming the key as sprawl.toml spells it, the value and
            the accepted spellings (never pydantic's ValidationError).

    Example:
        ```python
        from sprawl_orch import Config, SprawlError

        config = Config(sandbox={"arm": "copied_tree", "window_seconds": 30})
        try:
            Config(sandbox={"arm": "chroot"})
        except SprawlError as err:
            print(err.code, err.subject)  # E_CONFIG_INVALID [sandbox] arm
        ```
    """

    sandbox: SandboxConfig = SandboxConfig()
    state: StateConfig = StateConfig()
    apply: ApplyConfig = ApplyConfig()
    # Where the file was read from (None: defaults). Not a TOML key.
    source: Path | None = Field(default=None, exclude=True)


def _key_of(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if len(parts) > 1:
        return f"[{'.'.join(parts[:-1])}] {parts[-1]}"
    return parts[0] if parts else "(file)"


def _explain(err: ValidationError, path: Path | None, at: tuple[str, ...] = ()) -> ConfigError:
    first = err.errors()[0]
    key = _key_of((*at, *first["loc"]))
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "literal_error":
        expected = first.get("ctx", {}).get("expected", "")
        msg = f"accepted spellings: {expected}"
    elif first["type"] == "extra_forbidden":
        msg = "unknown key"
    cause = first.get("ctx", {}).get("error")
    recovery = cause.recovery if isinstance(cause, _Refusal) else None
    return _refused(key, first.get("input"), msg, path, recovery)


def _refused(
    key: str, found: object, msg: str, path: Path | str | None, recovery: str | None = None
) -> ConfigError:
    where = f" in {path}" if path else ""
    return ConfigError(
        ErrorCode.CONFIG_INVALID,
        subject=key,
        detail=f"{key} = {found!r}{where}: {msg}",
        recovery=recovery or f"fix {key}{where}, {_TAKE_DEFAULT}",
        key=key,
        value=found,
        reason=msg,
        path=None if path is None else str(path),
    )


def parse_config(data: dict[str, Any], path: str | Path | None = None) -> Config:
    """A Config from already-parsed TOML data.

    Args:
        data: the TOML as a dict (``tomllib.loads``'s answer), every key optional.
        path: where the data was read from, named in a refusal and kept as ``Config.source``.

    Returns:
        The frozen Config.

    Raises:
        SprawlError: E_CONFIG_INVALID naming the first bad key, its value and the accepted
            spellings.
    """
    source = None if path is None else Path(path)
    try:
        config = Config.model_validate(data)
    except ValidationError as err:
        raise _explain(err, source) from err
    except ConfigError as err:
        # A section's own constructor refused it (pydantic builds nested sections through
        # _Strict.__init__): the same refusal, now naming the file.
        if err.key is None or err.reason is None:
            raise
        own = None if err.recovery.endswith(_TAKE_DEFAULT) else err.recovery  # _Refusal's
        raise _refused(err.key, err.value, err.reason, source, own) from err.__cause__
    return config.model_copy(update={"source": source})


def load_config(path: str | Path | None = None, cwd: str | Path | None = None) -> Config:
    """Read a sprawl.toml: `path`, else the one in `cwd`, else all defaults.

    Args:
        path: a config file, or a directory whose ``sprawl.toml`` is read if present (so
            ``load_config(".")`` reads ./sprawl.toml, as ``sprawl-orch exec -C .`` does).
        cwd: the directory whose ``sprawl.toml`` is read when `path` is None (default: the
            process's current directory).

    Returns:
        The frozen Config; all defaults when no file is there.

    Raises:
        SprawlError: E_CONFIG_INVALID when the file can't be read, is not UTF-8 or not TOML,
            or a key is unknown or its value refused.

    Example:
        ```python
        from sprawl_orch import load_config

        config = load_config(".")  # ./sprawl.toml, or the defaults
        print(config.sandbox.window_seconds)
        ```
    """
    if path is not None and Path(path).is_dir():
        path, cwd = None, path
    if path is None:
        candidate = Path(Path.cwd() if cwd is None else cwd) / CONFIG_NAME
        if not candidate.is_file():
            return Config()
        path = candidate
    path = Path(path)
    return parse_config(read_toml(read_config_text(path), path), path)


def read_config_text(path: Path) -> str:
    """The file's text; E_CONFIG_INVALID (never a traceback) when it can't be read or is
    not UTF-8, which TOML requires."""
    with os_errors(
        ErrorCode.CONFIG_INVALID,
        path,
        "cannot read the config file",
        "check the path given with --config",
    ):
        data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            subject=str(path),
            detail=f"not UTF-8 (TOML files must be): byte 0x{data[err.start]:02x} at line "
            f"{line}, column {column} cannot be decoded",
            recovery="save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8), or remove the "
            "character",
        ) from err


def read_toml(text: str, path: Path, consequence: str = "") -> dict[str, Any]:
    """The config's TOML as data; E_CONFIG_INVALID at the position of a syntax error.
    `consequence` says what did not happen because of it (e.g. "; nothing was written")."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            subject=str(path),
            detail=f"not valid TOML: {err}{consequence}",
            recovery="fix the TOML syntax at the position shown",
        ) from err


def with_warm(config: Config, warm: bool) -> Config:
    """The config with `[sandbox.container] warm` set (the serve/mcp `--warm` switch and
    ExecTool(warm=...))."""
    container = config.sandbox.container.model_copy(update={"warm": warm})
    problem = warm_user_problem(container)
    if problem is not None:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            subject="sandbox.container.user",
            detail=f"sandbox.container.user = {container.user!r} with warm mode: {problem}",
            recovery="set [sandbox.container] user to another uid (the default is "
            '"65534:65534"), or run without warm mode',
        )
    return config.model_copy(
        update={"sandbox": config.sandbox.model_copy(update={"container": container})}
    )
