"""Which resolved addresses the proxy never connects to, written out range by range.

Python's `ipaddress.is_private` is not used: it is wider than this list (it includes the
documentation ranges 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 and 198.18.0.0/15), and on
the project's machines the package index resolves to 203.0.113.80 — `is_private` would
refuse the index itself. A name that resolves to any of these is refused unless the allow
list names that exact address (rules.Rules.listed_addresses)."""

from __future__ import annotations

import ipaddress
import socket
import threading

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
    # The embedded IPv4 of the NAT64 /96 is read (embedded_v4); a local-use translation prefix
    # may embed it at any of RFC 6052's offsets, through a translator of the host's network.
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation (RFC 8215)"),
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
# IPv4-translated addresses of stateless translation (RFC 2765's SIIT, ::ffff:0:a.b.c.d):
# not `ipv4_mapped` in Python's reading, so they passed every check until read here.
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


def embedded_v4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to an IPv4 host (mapped ::ffff:a.b.c.d, SIIT's
    ::ffff:0:a.b.c.d, NAT64 64:ff9b::a.b.c.d, 6to4 2002:AABB:CCDD::, Teredo's client):
    those reach the IPv4 address, so it is checked."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64 or address in _TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        # (server, client): packets to a Teredo address go, in UDP, to the client's IPv4.
        return address.teredo[1]
    return None


def _read_host_addresses() -> frozenset[IpAddress]:
    found: set[IpAddress] = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            try:
                found.add(ipaddress.ip_address(entry.address.partition("%")[0]))
            except ValueError:
                continue  # a link-layer (MAC) address: not an IP the proxy could reach
    return frozenset(found)


class _OwnAddresses:
    """The host's addresses, read again only after the kernel said one changed.

    Read per connection they cost 94.5 µs (getifaddrs through psutil). A netlink socket
    subscribed to address events (RTM_NEWADDR/RTM_DELADDR, IPv4 and IPv6) is checked
    instead: the kernel queues the event before the address change returns to whoever made
    it, so a change made before a check is always seen by that check (a full queue,
    ENOBUFS, counts as a change too). Where the socket cannot be made, every call reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: socket.socket | None = None
        self._cached: frozenset[IpAddress] | None = None
        self._tried = False

    def _subscribe(self) -> None:
        self._tried = True
        try:
            events = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE)
        except (OSError, AttributeError):
            return  # no netlink here (not Linux, or a filter refuses it): read every time
        try:
            events.bind((0, _RTMGRP_IPV4_IFADDR | _RTMGRP_IPV6_IFADDR))
            events.setblocking(False)
        except OSError:
            events.close()
            return  # subscribing refused: read every time, as before
        self._events = events

    def _changed(self) -> bool:
        assert self._events is not None
        changed = False
        while True:
            try:
                if not self._events.recv(65536):
                    return True
            except BlockingIOError:
                # Nothing queued: no address changed since the last read.
                return changed
            except OSError:
                return True  # ENOBUFS: events were lost, so anything may have changed
            changed = True

    def get(self) -> frozenset[IpAddress]:
        with self._lock:
            if not self._tried:
                self._subscribe()
            if self._events is None:
                return _read_host_addresses()
            if self._changed() or self._cached is None:
                self._cached = _read_host_addresses()
            return self._cached


_NETLINK_ROUTE = 0
_RTMGRP_IPV4_IFADDR = 0x10
_RTMGRP_IPV6_IFADDR = 0x100
# Made in the first caller's thread: the proxy's loop thread, in the host's namespace (the
# listener thread that enters a sandbox's namespace never asks for these).
_OWN = _OwnAddresses()


def host_addresses() -> frozenset[IpAddress]:
    """Every address on one of this host's own interfaces, current (interfaces come and go;
    _OwnAddresses says how it stays current without reading them per connection).
    The proxy runs in the host's namespace: a connection to one of these reaches the host's
    own services bound to 0.0.0.0 — on the project's machines eth0 is 192.0.2.2, a range
    REFUSED does not cover (a documentation range, like the package index's address)."""
    return _OWN.get()


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
