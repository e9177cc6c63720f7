"""sprawl-orch: run an AI agent's commands confined, and say which guarantees held.

The public face, importable from here (loaded on first use, so `sprawl-orch exec` pays
only for what it touches)::

    from orchestrator import ExecTool, load_config

    with ExecTool(None, ".") as tool:          # reads ./sprawl.toml, as `exec -C .` does
        result = tool.exec(["ls", "-a"])
        print(result.exit_code, result.statement)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.config import Config, load_config, parse_config
    from orchestrator.errors import ErrorCode, SprawlError
    from orchestrator.exec_tool import ExecTool
    from orchestrator.results import ExecResult, Refusal

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
    "Config": "orchestrator.config", "load_config": "orchestrator.config",
    "parse_config": "orchestrator.config", "ErrorCode": "orchestrator.errors",
    "SprawlError": "orchestrator.errors", "ExecTool": "orchestrator.exec_tool",
    "ExecResult": "orchestrator.results", "Refusal": "orchestrator.results",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
