"""What a tool with `[sandbox.network] allow` asks of every sandboxed command: the rules, the
environment that points clients at the proxy, the host CA bundle when `trust = "host"`, and
the statement's sentence. Built once per exec tool (plan_of)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sprawl_orch.core.environment import BUNDLE_VARIABLES
from sprawl_orch.egress.netns import PROXY_PORT
from sprawl_orch.egress.rules import Rules

if TYPE_CHECKING:
    from sprawl_orch.egress.interceptor import Interceptor


# What is read of a CA bundle at most, the host's (secrets/plan.py) or an image's
# (container/image_cas.py): Debian's is ~220 KB, Fedora's ~230 KB. A bundle of gigabytes was
# read whole into memory and written whole into the command's bundle.
MAX_BUNDLE = 8 << 20


def host_bundle(environ: Mapping[str, str]) -> Path | None:
    """The CA bundle the host's own Python trusts: $SSL_CERT_FILE, else OpenSSL's default."""
    named = environ.get("SSL_CERT_FILE")
    if named and os.path.isfile(named):
        return Path(named).resolve()
    default = ssl.get_default_verify_paths().cafile
    return Path(default).resolve() if default and os.path.isfile(default) else None


@dataclass(frozen=True)
class EgressPlan:
    allow: tuple[str, ...]
    rules: Rules
    bundle: Path | None = None  # set when trust = "host"
    # Issue 25, per command (secrets/plan.py): where the bundle is seen inside when not at its
    # host path, and the run whose secrets the proxy puts in.
    bundle_at: str | None = None
    secrets: Interceptor | None = None
    # Host files the command must not read (secrets' `file`s, real paths): an arm whose view
    # shows host paths (bwrap's /etc, /opt, tool directories) masks them.
    hidden: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{PROXY_PORT}"

    def env(self) -> dict[str, str]:
        """The proxy for every client that reads the environment, in both cases (curl reads
        only lower-case http_proxy); npm reads its own npm_config_* names. NO_PROXY is set
        empty so nothing bypasses the proxy: there is no other way out anyway."""
        out: dict[str, str] = {}
        for name in ("http_proxy", "https_proxy", "all_proxy"):
            out[name] = out[name.upper()] = self.url
        out["no_proxy"] = out["NO_PROXY"] = ""
        out["npm_config_proxy"] = out["npm_config_https_proxy"] = self.url
        if self.bundle is not None:
            for name in BUNDLE_VARIABLES:
                out[name] = self.bundle_at or str(self.bundle)
        return out

    def bundle_binds(self) -> tuple[tuple[str, str], ...]:
        """The CA bundle read-only in a container: at `bundle_at` when set (issue 25's bundle
        with its per-run CA), else at its own path (trust = "host")."""
        if self.bundle is None:
            return ()
        return ((str(self.bundle), self.bundle_at or str(self.bundle)),)

    def phrase(self) -> str:
        """The network axis's phrase in the statement (issue 24's exact words)."""
        hosts = ", ".join(self.allow)
        return (
            f"network: only HTTP(S) to {hosts}, through sprawl-orch's proxy; "
            "data can leave to those hosts"
        )

    def trust_note(self) -> str | None:
        if self.bundle is None:
            return None
        return (
            f'The host\'s CA bundle {self.bundle} is trusted inside (trust = "host"): '
            "a CA the host trusts can vouch for any name."
        )


def plan_of(
    allow: tuple[str, ...], deny: tuple[str, ...], trust: str, environ: Mapping[str, str]
) -> EgressPlan | None:
    """None for an empty allow list (no network at all, as without the section)."""
    if not allow:
        return None
    bundle = host_bundle(environ) if trust == "host" else None
    return EgressPlan(allow=allow, rules=Rules.parse(allow, deny), bundle=bundle)
