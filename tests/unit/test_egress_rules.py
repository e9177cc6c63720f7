"""[sandbox.network] entries, the deny-wins decision and the refused address ranges."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress.addresses import refused
from sprawl_orch.egress.rules import EntryError, Rules, parse_entry


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("http://x", "not a URL"),
        ("*.", "bare wildcard"),
        ("*", "bare wildcard"),
        ("x.org:0", "port 0 is outside 1-65535"),
        ("x.org:70000", "port 70000 is outside"),
        ("", "empty entry"),
        ("   ", "empty entry"),
        ("*.org", "top-level domain"),
        ("a..b", "is not a host name"),
        ("ex ample.org", "is not a host name"),
        ("x.org:https", "is not a number"),
        ("[::1", "never closed"),
    ],
)
def test_bad_entries_are_config_invalid_naming_the_entry(entry: str, words: str) -> None:
    with pytest.raises(SprawlError) as caught:
        parse_config({"sandbox": {"network": {"allow": ["good.example.org", entry]}}})
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "[sandbox.network] allow" in caught.value.subject
    assert repr(entry) in caught.value.detail and words in caught.value.detail
    with pytest.raises(SprawlError) as denied:
        parse_config({"sandbox": {"network": {"deny": [entry]}}})
    assert "[sandbox.network] deny" in denied.value.subject


def test_default_is_no_network_and_entries_parse() -> None:
    assert parse_config({}).sandbox.network.allow == ()
    net = parse_config(
        {"sandbox": {"network": {"allow": ["Example.ORG.", "*.cdn.example.org:443"]}}}
    ).sandbox.network
    rules = Rules.parse(net.allow, net.deny)
    assert rules.decide("example.org", 8080) is None  # no port: every port
    assert rules.decide("a.cdn.example.org", 443) is None
    assert rules.decide("a.cdn.example.org", 80) == "not in the allow list"
    # The wildcard is strictly below its suffix.
    assert rules.decide("cdn.example.org", 443) == "not in the allow list"
    assert rules.decide("evilexample.org", 443) == "not in the allow list"


def test_deny_wins_and_ip_literals_need_listing() -> None:
    rules = Rules.parse(("*.example.org", "10.1.2.3:443", "[::1]:8080"), ("bad.example.org",))
    assert rules.decide("bad.example.org", 443) == "denied by 'bad.example.org'"
    assert rules.decide("ok.example.org", 443) is None
    assert rules.decide("10.1.2.3", 443) is None
    assert rules.decide("10.1.2.3", 80) == "an IP literal not in the allow list"
    assert rules.decide("[::1]", 8080) is None and rules.decide("::1", 8080) is None
    assert rules.listed_addresses() == {
        ipaddress.ip_address("10.1.2.3"),
        ipaddress.ip_address("::1"),
    }
    denied = Rules.parse(("10.1.2.3",), ("10.1.2.3",))
    assert denied.listed_addresses() == frozenset()


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("127.0.0.1", "loopback"),
        ("0.0.0.0", "this network"),
        ("10.255.255.53", "RFC 1918"),
        ("172.31.0.1", "RFC 1918"),
        ("192.168.1.1", "RFC 1918"),
        ("100.64.0.1", "RFC 6598"),
        ("169.254.169.254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("255.255.255.255", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fd12::1", "RFC 4193"),
        ("fe80::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "carries 127.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "carries 169.254.169.254"),
        ("2002:0a00:0001::1", "carries 10.0.0.1"),
    ],
)
def test_refused_ranges(address: str, words: str) -> None:
    ip = ipaddress.ip_address(address)
    why = refused(ip)
    assert why is not None and words in why
    assert refused(ip, frozenset({ip})) is None  # listed exactly: allowed


def test_documentation_ranges_are_not_refused() -> None:
    # is_private says True for these; the package index here resolves into 203.0.113.0/24.
    for address in ("203.0.113.80", "192.0.2.2", "198.51.100.7", "198.18.0.1", "8.8.8.8"):
        ip = ipaddress.ip_address(address)
        assert ip.is_private or address == "8.8.8.8"
        assert refused(ip) is None


@given(st.ip_addresses())
def test_refused_never_misses_loopback_or_private(ip: ipaddress._BaseAddress) -> None:
    address = ipaddress.ip_address(int(ip)) if ip.version == 4 else ipaddress.IPv6Address(int(ip))
    v4 = address if isinstance(address, ipaddress.IPv4Address) else address.ipv4_mapped
    if v4 is not None and (v4.is_loopback or v4 in ipaddress.ip_network("10.0.0.0/8")):
        assert refused(address) is not None
    if address.is_loopback or address.is_link_local or address.is_multicast:
        assert refused(address) is not None


def test_entry_error_is_a_value_error() -> None:
    with pytest.raises(EntryError):
        parse_entry("*")


def test_doctor_says_per_arm_whether_allow_lists_are_offered() -> None:
    from sprawl_orch.core.arms import ArmName
    from sprawl_orch.egress.offer import doctor_line

    assert doctor_line(ArmName.LINUX_NAMESPACES).startswith("allow-lists offered")
    assert doctor_line(ArmName.CONTAINER, "podman").startswith("allow-lists offered")
    assert doctor_line(ArmName.CONTAINER, "docker").startswith("allow-lists offered")
    assert "not under gVisor" in doctor_line(ArmName.CONTAINER, "docker")
    assert "no network namespace" in doctor_line(ArmName.COPIED_TREE)


def _hello_record(*extensions: object) -> bytes:
    from tlslite.messages import ClientHello, RecordHeader3

    hello = ClientHello().create((3, 3), bytearray(32), bytearray(0), [0x1301])
    hello.extensions = list(extensions)
    body = hello.write()
    return bytes(RecordHeader3().create((3, 1), 22, len(body)).write() + body)


def test_hello_names_one_server_and_hides_none() -> None:
    from tlslite.extensions import SNIExtension, TLSExtension

    from sprawl_orch.egress.hello import NotTls, parse_hello, record_length

    sni = SNIExtension().create(bytearray(b"a.example.org"))
    record = _hello_record(sni)
    assert record_length(record[:5]) == len(record) - 5
    assert parse_hello(record).server_name == "a.example.org"
    assert parse_hello(_hello_record()).server_name is None
    two = SNIExtension().create(hostNames=[bytearray(b"a.example.org"), bytearray(b"b.org")])
    with pytest.raises(NotTls, match="names 2 servers"):
        parse_hello(_hello_record(two))
    ech = TLSExtension(extType=0xFE0D).create(bytearray(b"\x00\x01"))
    with pytest.raises(NotTls, match="Encrypted Client Hello"):
        parse_hello(_hello_record(sni, ech))
    with pytest.raises(NotTls, match="not a handshake"):
        record_length(b"\x17\x03\x03\x00\x10")
