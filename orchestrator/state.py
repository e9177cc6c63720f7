"""Where sprawl-orch keeps its state: kept output, the ledger.

`[state] dir` wins; else $XDG_STATE_HOME/sprawl-orch; else ~/.local/state/sprawl-orch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.config import Config


def state_dir(config: Config, environ: Mapping[str, str]) -> Path:
    if config.state.dir is not None:
        return config.state.dir
    xdg = environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path(environ.get("HOME", "/root")) / ".local" / "state"
    return base / "sprawl-orch"


def ledger_path(config: Config, environ: Mapping[str, str]) -> Path:
    return config.state.ledger or state_dir(config, environ) / "ledger.jsonl"
