"""`sprawl.toml`: parsed once into pydantic models, refused with E_CONFIG_INVALID.

Every refusal names the key, the value found and the accepted spellings, so the
person can fix the file without reading this code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sprawl_orch.config.refusal import TAKE_DEFAULT, explain, read_config_text, read_toml, refused
from sprawl_orch.config.sections import (
    ARM_SPELLINGS,
    BUDGET_BYTES,
    DEFAULT_BUDGET,
    ENV_NAME,
    KEEP_BYTES,
    LEDGER_BUDGET_BYTES,
    ApplyConfig,
    ArmSpelling,
    Config,
    ContainerConfig,
    CopyConfig,
    EngineImages,
    NativeConfig,
    NetworkConfig,
    PythonConfig,
    SandboxConfig,
    StateConfig,
    warm_user_problem,
)
from sprawl_orch.core.errors import ConfigError, ErrorCode, SprawlError

__all__ = [
    "ARM_SPELLINGS",
    "BUDGET_BYTES",
    "CONFIG_NAME",
    "DEFAULT_BUDGET",
    "ENV_NAME",
    "KEEP_BYTES",
    "LEDGER_BUDGET_BYTES",
    "ApplyConfig",
    "ArmSpelling",
    "Config",
    "ContainerConfig",
    "CopyConfig",
    "EngineImages",
    "NativeConfig",
    "NetworkConfig",
    "PythonConfig",
    "SandboxConfig",
    "StateConfig",
    "load_config",
    "parse_config",
    "read_config_text",
    "read_toml",
    "warm_user_problem",
    "with_warm",
]

CONFIG_NAME = "sprawl.toml"


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
        raise explain(err, source) from err
    except ConfigError as err:
        # A section's own constructor refused it (pydantic builds nested sections through
        # _Strict.__init__): the same refusal, now naming the file.
        if err.key is None or err.reason is None:
            raise
        own = None if err.recovery.endswith(TAKE_DEFAULT) else err.recovery  # Refusal's
        raise refused(err.key, err.value, err.reason, source, own) from err.__cause__
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
