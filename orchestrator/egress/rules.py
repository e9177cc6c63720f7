"""`[sandbox.network] allow` / `deny` entries: a host name, `*.` + a suffix, or an IP literal,
each optionally scoped to one port (`name:443`, `[::1]:8080`). Deny wins over allow.

An entry without a port matches every port. A wildcard `*.example.org` matches names *below*
example.org, never example.org itself (sandbox-runtime's and curl's reading). A URL, a bare
`*`, `*.` with nothing after it, port 0 or above 65535 and an empty entry are refused: each
would either match more than the person meant or nothing at all."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

# One DNS label: letters, digits, hyphens, underscores (some registries' CDN names use them),
# not starting or ending with a hyphen.
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_PORT = re.compile(r"^[0-9]{1,5}$")

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class EntryError(ValueError):
    """A bad entry: the message names it and says what was wrong."""


@dataclass(frozen=True)
class Entry:
    """One parsed entry. `host` is lower-case without a trailing dot; `wildcard` means
    names strictly below `host`; `address` is set when the entry is an IP literal."""

    text: str
    host: str
    port: int | None
    wildcard: bool = False
    address: IpAddress | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.address is not None:
            return literal(host) == self.address
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


# An authority as a request may name one: `name[:port]` or `[v6][:port]`, nothing else.
# urlsplit reads past '@', '\\', '/', '#' and '?' to a hostname, while a front end may route by
# the part before them (`Host: evil.example@allowed` passed a urlsplit check and went upstream
# as written: tests/secrets/test_attacks.py, and the plain path's own test).
AUTHORITY = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::([0-9]{1,5}))?")


def normal_host(host: str) -> str:
    """The form names are compared in: lower case, one trailing dot dropped."""
    return host.lower().removesuffix(".")


def literal(host: str) -> IpAddress | None:
    """The address when `host` is an IP literal (brackets allowed for IPv6), else None."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise EntryError(f"{text!r}: an IPv6 literal opened with '[' is never closed")
        host, rest = text[1:close], text[close + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise EntryError(f"{text!r}: only ':PORT' may follow ']'")
        return host, _port(text, rest[1:])
    if text.count(":") > 1:
        # A bare IPv6 literal has no port: brackets are needed to give one.
        return text, None
    host, sep, port = text.partition(":")
    return host, (_port(text, port) if sep else None)


def _port(text: str, port: str) -> int:
    if not _PORT.match(port):
        raise EntryError(f"{text!r}: port {port!r} is not a number")
    number = int(port)
    if not 1 <= number <= 65535:
        raise EntryError(f"{text!r}: port {number} is outside 1-65535")
    return number


def parse_entry(text: str) -> Entry:
    """One entry, or EntryError naming it and what is wrong with it."""
    if not text.strip():
        raise EntryError(f"{text!r}: an empty entry matches nothing; remove it")
    if "/" in text or "://" in text:
        raise EntryError(
            f"{text!r}: give a host name (and optionally :PORT), not a URL or a path; "
            "e.g. 'example.org' or 'example.org:443'"
        )
    host, port = _split_port(text.strip())
    address = literal(host)
    if address is not None:
        return Entry(text=text, host=str(address), port=port, address=address)
    name = normal_host(host)
    wildcard = name.startswith("*.")
    if name == "*" or name == "*.":
        raise EntryError(
            f"{text!r}: a bare wildcard would allow every host; name the hosts "
            "(a wildcard needs a suffix: '*.example.org')"
        )
    if wildcard:
        name = name[2:]
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise EntryError(
            f"{text!r}: {host!r} is not a host name (labels of letters, digits, '-' and '_'; "
            "'*.' only as the first label)"
        )
    if wildcard and len(labels) < 2:
        raise EntryError(
            f"{text!r}: '*.{name}' would match every name under a top-level domain; "
            "give at least two labels after '*.'"
        )
    return Entry(text=text, host=name, port=port, wildcard=wildcard)


@dataclass(frozen=True)
class Rules:
    """The parsed allow and deny lists. `decide` is the policy on names and ports; which
    resolved addresses may be reached is addresses.py's."""

    allow: tuple[Entry, ...]
    deny: tuple[Entry, ...] = ()

    @classmethod
    def parse(cls, allow: tuple[str, ...], deny: tuple[str, ...] = ()) -> Rules:
        return cls(
            allow=tuple(parse_entry(e) for e in allow), deny=tuple(parse_entry(e) for e in deny)
        )

    def decide(self, host: str, port: int) -> str | None:
        """None when (host, port) may be reached by name, else why not."""
        host = normal_host(host)
        for entry in self.deny:
            if entry.matches(host, port):
                return f"denied by {entry.text!r}"
        if any(entry.matches(host, port) for entry in self.allow):
            return None
        if literal(host) is not None:
            return "an IP literal not in the allow list"
        return "not in the allow list"

    def denied_address(self, address: IpAddress, port: int) -> str | None:
        """Why a *resolved* address is denied, or None: a denied IP literal wins over the
        allowed name that resolved to it, as deny wins everywhere else."""
        for entry in self.deny:
            if entry.address is not None and entry.matches(str(address), port):
                return f"denied by {entry.text!r}"
        return None

    def listed_addresses(self, port: int | None = None) -> frozenset[IpAddress]:
        """IP literals the allow list names (and the deny list does not) for `port`: the only
        way a refused range (loopback, private, metadata, ...) becomes reachable. An entry's
        port scope holds here too: '127.0.0.1:8080' lists loopback for port 8080 only, never
        for a name resolving to 127.0.0.1 on another port (port None: any port's listing)."""

        def scoped(entry: Entry) -> bool:
            return port is None or entry.port is None or entry.port == port

        denied = {e.address for e in self.deny if e.address is not None and scoped(e)}
        return frozenset(
            e.address
            for e in self.allow
            if e.address is not None and scoped(e) and e.address not in denied
        )
