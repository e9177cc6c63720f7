"""The sections of `sprawl.toml` as pydantic models (frozen, unknown keys refused).

A bad value raises E_CONFIG_INVALID through config/refusal.py whether it came from a file
(config/__init__.py's parse_config) or was built directly (``Config(sandbox=...)``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sprawl_orch.config.refusal import Refusal, explain
from sprawl_orch.config.secrets import SecretConfig, check_secrets
from sprawl_orch.copy.bounds import MAX_BYTES, MAX_DEPTH, MAX_FILES, compile_excludes
from sprawl_orch.core.credentials import credential_pattern, why
from sprawl_orch.egress.rules import parse_entry
from sprawl_orch.engines.engine import IMAGE_ID, EngineName

KEEP_BYTES = 16 * 1024 * 1024
BUDGET_BYTES = 256 * 1024 * 1024
LEDGER_BUDGET_BYTES = 64 * 1024 * 1024

ArmSpelling = Literal["auto", "container", "native", "copied_tree", "none", "python"]
ARM_SPELLINGS: tuple[str, ...] = ("auto", "container", "native", "copied_tree", "none", "python")

DEFAULT_BUDGET = 2 * 1024**3  # 8 copies at MAX_BYTES; each call's own copy is never evicted


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _image_id(value: str | None) -> str | None:
    if value is not None and not IMAGE_ID.match(value):
        # Issue 27: the recovery said "remove it to take the default", and there is no
        # default image; the command that fixes it was only in the detail.
        raise Refusal(
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
            raise explain(err, None, self._AT) from err


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
    # wasmtime's set_fuel takes a u64: 2**64 wrapped to 0 fuel (an instant "fuel" limit).
    fuel: int = Field(default=400_000_000_000, gt=0, le=2**64 - 1, strict=True)
    # The guest's linear memory; CPython needs ~10 MiB to start, wasm32 stops at 4 GiB.
    memory_bytes: int = Field(
        default=512 * 1024 * 1024, ge=16 * 1024 * 1024, le=4 * 1024**3, strict=True
    )
    # Epoch interruption: the guest traps this long after it started, whatever it runs.
    wall_seconds: int = Field(default=600, gt=0, le=7 * 24 * 3600, strict=True)


class NativeConfig(_Strict):
    """``[sandbox.native]``: which Linux mechanism the native arm uses. "auto": bwrap where
    an unprivileged user namespace can be made, else Landlock + seccomp where the kernel's
    ABI carries it (native_fallbacks/landlock.py); a name: that one or refused."""

    _AT = ("sandbox", "native")

    mechanism: Literal["auto", "bwrap", "landlock"] = "auto"


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
    native: NativeConfig = NativeConfig()
    # [sandbox.secrets.NAME]: a placeholder inside, the value put in by the proxy for its
    # hosts only (orchestrator/secrets/, docs/secrets.md).
    secrets: dict[str, SecretConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _secrets(self) -> SandboxConfig:
        net = self.network
        check_secrets(self.secrets, net.allow, net.deny, (*self.env_passthrough, *self.credentials))
        return self

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
