"""sprawl-orch: run an AI agent's commands confined, and say which guarantees held.

The public face, importable from here (loaded on first use, so `sprawl-orch exec` pays
only for what it touches)::

    from sprawl_orch import ExecTool, load_config

    with ExecTool(".") as tool:          # reads ./sprawl.toml, as `exec -C .` does
        result = tool.exec(["ls", "-a"])
        print(result.exit_code, result.statement)

`__all__` is the face, and `dir(sprawl_orch)` lists it; docs/api.md is generated from its
docstrings (tests/unit/test_api_page.py). Everything else is implementation.
"""

from __future__ import annotations

import importlib

# Not typing (~3 ms): the thin client imports this package on every `sprawl-orch exec`, and
# mypy reads any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sprawl_orch.config import Config, load_config, parse_config
    from sprawl_orch.core.errors import (
        BadRequest,
        CommandRefused,
        ConfigError,
        CopyBoundError,
        EngineError,
        EngineRefused,
        ErrorCode,
        ImageInvalid,
        InternalError,
        RequestError,
        SandboxDenied,
        SprawlError,
        StorageError,
        ToolUnavailable,
        UnknownHandle,
    )
    from sprawl_orch.runs.results import ExecResult, Refusal
    from sprawl_orch.tool.exec_tool import ExecTool

__all__ = [  # noqa: RUF022 -- the order docs/api.md shows: the tool first, then the errors
    "Config",
    "ErrorCode",
    "ExecResult",
    "ExecTool",
    "Refusal",
    "SprawlError",
    "load_config",
    "parse_config",
    # The error tree (core/errors.py): one base, a family per code group.
    "BadRequest",
    "CommandRefused",
    "ConfigError",
    "CopyBoundError",
    "EngineError",
    "EngineRefused",
    "ImageInvalid",
    "InternalError",
    "RequestError",
    "SandboxDenied",
    "StorageError",
    "ToolUnavailable",
    "UnknownHandle",
]

_WHERE = {
    "Config": "sprawl_orch.config",
    "load_config": "sprawl_orch.config",
    "parse_config": "sprawl_orch.config",
    "ErrorCode": "sprawl_orch.core.errors",
    "SprawlError": "sprawl_orch.core.errors",
    "BadRequest": "sprawl_orch.core.errors",
    "CommandRefused": "sprawl_orch.core.errors",
    "ConfigError": "sprawl_orch.core.errors",
    "CopyBoundError": "sprawl_orch.core.errors",
    "EngineError": "sprawl_orch.core.errors",
    "EngineRefused": "sprawl_orch.core.errors",
    "ImageInvalid": "sprawl_orch.core.errors",
    "InternalError": "sprawl_orch.core.errors",
    "RequestError": "sprawl_orch.core.errors",
    "SandboxDenied": "sprawl_orch.core.errors",
    "StorageError": "sprawl_orch.core.errors",
    "ToolUnavailable": "sprawl_orch.core.errors",
    "UnknownHandle": "sprawl_orch.core.errors",
    "ExecTool": "sprawl_orch.tool.exec_tool",
    "ExecResult": "sprawl_orch.runs.results",
    "Refusal": "sprawl_orch.runs.results",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sprawl_orch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    # The face, and the module's dunders: the names are loaded on first use (__getattr__), so
    # the module's own dict lacks them, and holds helpers (importlib) and loaded sub-packages.
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
