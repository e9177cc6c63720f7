"""Where sprawl-orch keeps its state: kept output, the ledger, admission evidence, the
shared guardian's socket.

`[state] dir` wins; else $XDG_STATE_HOME/sprawl-orch; else ~/.local/state/sprawl-orch.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from sprawl_orch.config import Config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.private import private_tmp


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


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def refuse_state_in_tree(workdir: Path, config: Config, environ: Mapping[str, str]) -> None:
    """E_CONFIG_INVALID when the state directory or the ledger lies in the working directory
    (or holds it), checked before anything of ours is written. Found by issue 30: with
    `[state] dir` in the tree the sync refused the overlap, yet the refused command had
    already made ledger.jsonl and copies/<key>/0/{lock,meta.json} in the person's tree --
    and a refused command must change nothing of it. Real paths: a link in the way counts."""
    tree = os.path.realpath(workdir)
    state = os.path.realpath(state_dir(config, environ))
    ledger = os.path.realpath(ledger_path(config, environ))
    for name, path in (("state directory", state), ("ledger", ledger)):
        if _inside(path, tree) or (name == "state directory" and _inside(tree, path)):
            raise SprawlError(
                ErrorCode.CONFIG_INVALID,
                "[state] dir" if name == "state directory" else "[state] ledger",
                f"the {name} {path} and the working directory {tree} overlap: sprawl-orch "
                "would write its copies, ledger and output into the person's tree",
                "set [state] dir (and ledger) or XDG_STATE_HOME to a place outside the "
                "working directory",
            )


# sun_path holds 108 bytes on Linux, 104 on macOS (with the NUL).
SOCKET_PATH_MAX = 100


# What the guardian reaches the engines through, and which guardian code runs: callers that
# differ in any of these must not share one (it would remove containers on another daemon,
# or speak another version of the protocol).
GUARDIAN_ENV: tuple[str, ...] = (
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "PATH",
)


def guardian_socket(state: Path, environ: Mapping[str, str], code: Path) -> Path:
    """The shared guardian's socket for this state directory (guardian/server.py), one per
    engine environment and guardian code (`code`: where the `guardian` package is loaded
    from, with this interpreter). In the state directory when the path fits a unix socket
    address; else in a private directory of ours under the temp dir."""
    state = state.absolute()
    seen = [sys.executable, str(code), *(f"{k}={environ.get(k, '')}" for k in GUARDIAN_ENV)]
    flavour = hashlib.sha256("\0".join(seen).encode()).hexdigest()[:12]
    candidate = state / f"guardian-{flavour}.sock"
    if len(os.fsencode(candidate)) <= SOCKET_PATH_MAX:
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        return candidate
    digest = hashlib.sha256(os.fsencode(state)).hexdigest()[:16]
    return private_tmp() / f"guardian-{digest}-{flavour}.sock"
