"""What went out: one record per connection the command asked the proxy for, and their sum."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# A command's records kept in its result: the first MAX_RECORDS, within MAX_RECORD_BYTES of
# their text. A command that opened connections in a loop grew the result (and the ledger
# line, and serve's answer) without end; past these only the totals grow, and the result
# says how many records it dropped.
MAX_RECORDS = 1000
MAX_RECORD_BYTES = 512 * 1024
# Hosts named in the summary sentence: a command can ask for any number of names.
MAX_SUMMARY_HOSTS = 20

# What a command could reach (the result's network.possible): nothing (the network axis
# kept), the allow-list through the proxy, or anything (an arm that does not keep the axis).
POSSIBLE_NONE = "none"
POSSIBLE_ALLOW_LIST = "allow-list"
POSSIBLE_ANY = "any"


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

    def size(self) -> int:
        """About the bytes this record takes in a JSON result (its strings and ~150 of keys
        and numbers)."""
        return 150 + len(self.host) + len(self.reason) + len(self.address or "")


@dataclass
class Tally:
    """Every connection counted; the first ones kept as records, within the bounds above."""

    kept: list[Egress] = field(default_factory=list)
    kept_bytes: int = 0
    dropped: int = 0
    allowed: int = 0
    refused: int = 0
    up: int = 0
    down: int = 0
    hosts: set[str] = field(default_factory=set)

    def add(self, record: Egress) -> None:
        if record.allowed:
            self.allowed += 1
            self.hosts.add(f"{record.host}:{record.port}")
        else:
            self.refused += 1
        self.up += record.bytes_up
        self.down += record.bytes_down
        size = record.size()
        if len(self.kept) < MAX_RECORDS and self.kept_bytes + size <= MAX_RECORD_BYTES:
            self.kept.append(record)
            self.kept_bytes += size
        else:
            self.dropped += 1

    @classmethod
    def of(cls, records: Iterable[Egress]) -> Tally:
        tally = cls()
        for record in records:
            tally.add(record)
        return tally

    def summary(self) -> str:
        """The statement's sentence about what went out."""
        hosts = sorted(self.hosts)
        named = ", ".join(hosts[:MAX_SUMMARY_HOSTS])
        if len(hosts) > MAX_SUMMARY_HOSTS:
            named += f" and {len(hosts) - MAX_SUMMARY_HOSTS} more"
        text = (
            f"Through the proxy: {self.allowed} connection(s) allowed"
            f"{' to ' + named if named else ''}, {self.refused} refused; "
            f"{self.up} bytes up, {self.down} bytes down."
        )
        if self.dropped:
            text += (
                f" {self.dropped} connection record(s) not kept in the result (past "
                f"{MAX_RECORDS} records or {MAX_RECORD_BYTES} bytes of them; counted above)."
            )
        return text


def summary(records: Iterable[Egress]) -> str:
    """The statement's sentence about what went out (every record counted)."""
    return Tally.of(records).summary()
