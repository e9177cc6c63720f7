"""What went out: one record per connection the command asked the proxy for, and their sum."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Egress:
    """One connection asked of the proxy. `reason` says why it was refused (or, when allowed,
    how it ended); `address` is the one connected to (None when refused before connecting)."""

    kind: str  # "connect" (HTTPS tunnel) or "http" (plain HTTP forwarded)
    host: str
    port: int
    allowed: bool
    reason: str
    address: str | None
    bytes_up: int
    bytes_down: int
    duration_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        verdict = "allowed" if self.allowed else "REFUSED"
        return f"{verdict} {self.kind} {self.host}:{self.port}: {self.reason}"


def summary(records: tuple[Egress, ...]) -> str:
    """The statement's sentence about what went out."""
    allowed = [r for r in records if r.allowed]
    refused = len(records) - len(allowed)
    up = sum(r.bytes_up for r in records)
    down = sum(r.bytes_down for r in records)
    hosts = sorted({f"{r.host}:{r.port}" for r in allowed})
    text = (
        f"Through the proxy: {len(allowed)} connection(s) allowed"
        f"{' to ' + ', '.join(hosts) if hosts else ''}, {refused} refused; "
        f"{up} bytes up, {down} bytes down."
    )
    return text
