"""Which resolved addresses the proxy never connects to, written out range by range.

Python's `ipaddress.is_private` is not used: it is wider than this list (it includes the
documentation ranges 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 and 198.18.0.0/15), and on
the project's machines the package index resolves to 203.0.113.80 — `is_private` would
refuse the index itself. A name that resolves to any of these is refused unless the allow
list names that exact address (rules.Rules.listed_addresses)."""

from __future__ import annotations

import ipaddress

import psutil

from sprawl_orch.egress.rules import IpAddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

REFUSED: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "'this network' (a connect to 0.0.0.0 reaches the host's loopback)"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private (RFC 1918)"),
    ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.168.0.0/16", "private (RFC 1918)"),
    ("100.64.0.0/10", "carrier-grade NAT (RFC 6598)"),
    ("169.254.0.0/16", "link-local"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved (and 255.255.255.255 broadcast)"),
    ("::/96", "unspecified, loopback or IPv4-compatible IPv6"),
    ("fc00::/7", "unique local (RFC 4193)"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
)

# Cloud metadata services. Most already fall in a range above (169.254.169.254 link-local,
# fd00:ec2::254 unique local, 100.100.100.200 RFC 6598); they are named so a refusal says
# "metadata", and so no future edit of the ranges can let them through.
METADATA: tuple[str, ...] = (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
    "169.254.170.2",  # AWS ECS task metadata
    "fd00:ec2::254",  # AWS IPv6
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud (legacy)
)

_NETWORKS: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(net), why) for net, why in REFUSED
)
_METADATA = frozenset(ipaddress.ip_address(a) for a in METADATA)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_v4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to an IPv4 host (mapped ::ffff:a.b.c.d, NAT64
    64:ff9b::a.b.c.d, 6to4 2002:AABB:CCDD::): those reach the IPv4 address, so it is checked."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return None


def host_addresses() -> frozenset[IpAddress]:
    """Every address on one of this host's own interfaces, read afresh (interfaces come and go).
    The proxy runs in the host's namespace: a connection to one of these reaches the host's
    own services bound to 0.0.0.0 — on the project's machines eth0 is 192.0.2.2, a range
    REFUSED does not cover (a documentation range, like the package index's address)."""
    found: set[IpAddress] = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            try:
                found.add(ipaddress.ip_address(entry.address.partition("%")[0]))
            except ValueError:
                continue  # a link-layer (MAC) address: not an IP the proxy could reach
    return frozenset(found)


def refused(
    address: IpAddress,
    listed: frozenset[IpAddress] = frozenset(),
    own: frozenset[IpAddress] = frozenset(),
) -> str | None:
    """Why the proxy must not connect to `address`, or None. An address the allow list names
    exactly is allowed whatever its range; `own` are the host's interface addresses."""
    if address in listed:
        return None
    inner = embedded_v4(address)
    if inner is not None:
        why = refused(inner, listed, own)
        return None if why is None else f"{address} carries {inner}: {why}"
    if address in _METADATA:
        return f"{address} is a cloud metadata address"
    for network, why in _NETWORKS:
        if address in network:
            return f"{address} is {why} ({network})"
    if address in own:
        return f"{address} is an address of this host itself (its own services listen there)"
    return None
