"""A secret as the orchestrator holds it for a tool (its value read once), and the statement's
words. Kept apart from run.py: importing this costs nothing (no cryptography)."""

from __future__ import annotations

import secrets as random
from collections.abc import Mapping
from dataclasses import dataclass, field

from sprawl_orch.egress.rules import Rules

# Where the combined bundle is seen inside every arm (bwrap: --ro-bind-data into its private
# /run; containers: a read-only bind). One fixed path, so no host path is named inside.
BUNDLE_INSIDE = "/run/sprawl-orch/ca-bundle.pem"


@dataclass(frozen=True)
class Spec:
    """A secret as configured and read: its value is here, never in the config."""

    name: str
    hosts: Rules
    host_list: tuple[str, ...]
    value: str = field(repr=False)  # never in a repr, a log line or a traceback's locals
    header: str | None = None
    format: str = "{value}"
    basic_user: str | None = None
    # The real path of the `file` the value was read from: the bwrap arm's view masks it.
    file: str | None = None


def placeholder(name: str) -> str:
    """A random stand-in, per run: long enough that no request carries it by chance, in the
    letters every header and URL allows."""
    return f"SPRAWL_PLACEHOLDER_{name}_{random.token_hex(16)}"


def phrase(specs: Mapping[str, tuple[str, ...]]) -> str:
    """The statement's words for the secrets (issue 25's own), and the trust it costs."""
    return " ".join(
        f"{name} reaches only {', '.join(hosts)}, injected by sprawl-orch; the command saw "
        "a placeholder."
        for name, hosts in specs.items()
    ) + (
        " The run's own CA (its key never leaves sprawl-orch) and the host's CAs are the "
        "command's trust store."
    )
