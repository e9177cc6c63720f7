"""Where sprawl-orch keeps its state: kept output, the ledger.

`[state] dir` wins; else $XDG_STATE_HOME/sprawl-orch; else ~/.local/state/sprawl-orch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.config import Config


def state_dir(config: Config, environ: Mapping[str, str]) -> Path:
    if config.state.dir is not None:
        return config.state.dir.expanduser()
    xdg = environ.get("XDG_STATE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "sprawl-orch"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / "sprawl-orch"


def ledger_path(config: Config, environ: Mapping[str, str]) -> Path:
    if config.state.ledger is not None:
        return config.state.ledger.expanduser()
    return state_dir(config, environ) / "ledger.jsonl"
