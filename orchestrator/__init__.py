"""sprawl-orch: run an AI agent's commands confined, and say which guarantees held.

The public face, importable from here (loaded on first use, so `sprawl-orch exec` pays
only for what it touches)::

    from sprawl_orch import ExecTool, load_config

    with ExecTool(None, ".") as tool:          # reads ./sprawl.toml, as `exec -C .` does
        result = tool.exec(["ls", "-a"])
        print(result.exit_code, result.statement)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sprawl_orch.config import Config, load_config, parse_config
    from sprawl_orch.core.errors import ErrorCode, SprawlError
    from sprawl_orch.runs.results import ExecResult, Refusal
    from sprawl_orch.tool.exec_tool import ExecTool

__all__ = [
    "Config",
    "ErrorCode",
    "ExecResult",
    "ExecTool",
    "Refusal",
    "SprawlError",
    "load_config",
    "parse_config",
]

_WHERE = {
    "Config": "sprawl_orch.config",
    "load_config": "sprawl_orch.config",
    "parse_config": "sprawl_orch.config",
    "ErrorCode": "sprawl_orch.core.errors",
    "SprawlError": "sprawl_orch.core.errors",
    "ExecTool": "sprawl_orch.tool.exec_tool",
    "ExecResult": "sprawl_orch.runs.results",
    "Refusal": "sprawl_orch.runs.results",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
