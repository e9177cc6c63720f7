"""The docker CLI's own config directory (docker.py's create, exec and rm run the CLI)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sprawl_orch.core.private import private_tmp


def cli_config(conn: Mapping[str, str], home: str) -> dict[str, str]:
    """The docker CLI's config directory: an empty one of ours. The CLI read
    $HOME/.docker/config.json with the command's HOME (/tmp on this arm), which any local
    account can plant, and the person's own DOCKER_CONFIG; either one's "proxies" put
    HTTP_PROXY values (a proxy password included) into the command's environment, names the
    result never listed (tests/escapes/test_shaping.py). Nothing else in it matters to
    create/exec/rm with DOCKER_HOST set, except TLS certificates, which stay where they were."""
    own = private_tmp() / "docker-cli"
    own.mkdir(mode=0o700, exist_ok=True)
    config = own / "config.json"
    if not config.exists():
        config.write_text("{}\n")  # present: no fallback to the legacy $HOME/.dockercfg
    out = {"DOCKER_CONFIG": str(own)}
    if conn.get("DOCKER_TLS_VERIFY") and not conn.get("DOCKER_CERT_PATH"):
        out["DOCKER_CERT_PATH"] = conn.get("DOCKER_CONFIG") or str(Path(home) / ".docker")
    return out
