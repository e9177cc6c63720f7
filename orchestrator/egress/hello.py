"""The server name (SNI) of a TLS ClientHello, read without terminating TLS.

Parsing is tlslite-ng's (RecordHeader3 for the record layer, ClientHello for the message and
its server_name extension). Measured against dpkt 1.9.8 on a 517-byte ClientHello made by
Python's ssl: tlslite-ng 263 µs, dpkt 83 µs — but dpkt returns the server_name extension as raw
bytes, leaving its list encoding to be parsed by hand, which this project does not do.
mitmproxy's parser needs mitmproxy itself (11.1+ requires Python 3.12; we support 3.11).
"""

from __future__ import annotations

from dataclasses import dataclass

from tlslite.constants import ExtensionType
from tlslite.errors import TLSError
from tlslite.messages import ClientHello, RecordHeader3
from tlslite.utils.codec import DecodeError, Parser

RECORD_HEADER = 5
_HANDSHAKE = 22
_CLIENT_HELLO = 1
# Encrypted Client Hello (draft-ietf-tls-esni, type 0xfe0d): the real server name travels
# encrypted and the visible SNI is only the front's public name — domain fronting the SNI
# check cannot see, so a hello carrying it is refused.
ENCRYPTED_CLIENT_HELLO = 0xFE0D
# A ClientHello with post-quantum key shares is ~1.8 KB; one TLS record holds up to 16 KB.
MAX_RECORD = 16384


class NotTls(ValueError):
    """The bytes are not a TLS ClientHello (or not one read whole from one record)."""


@dataclass(frozen=True)
class Hello:
    server_name: str | None


def record_length(head: bytes) -> int:
    """The length of the record whose 5-byte header is `head`; NotTls unless it is a
    handshake record of a plausible size."""
    try:
        header = RecordHeader3().parse(Parser(bytearray(head[:RECORD_HEADER])))
    except (DecodeError, TLSError, SyntaxError) as err:
        raise NotTls(f"not a TLS record header: {err}") from err
    if header.type != _HANDSHAKE:
        raise NotTls(f"first record is of type {header.type}, not a handshake (22)")
    if not 0 < header.length <= MAX_RECORD:
        raise NotTls(f"record length {header.length} is outside 1-{MAX_RECORD}")
    return int(header.length)


def parse_hello(record: bytes) -> Hello:
    """The ClientHello of one whole handshake record (header included). A ClientHello split
    over several records is refused rather than reassembled (no client we know does it for a
    hello this small; refusing fails closed)."""
    body = record[RECORD_HEADER:]
    if not body or body[0] != _CLIENT_HELLO:
        raise NotTls("the handshake record does not start with a ClientHello")
    try:
        hello = ClientHello().parse(Parser(bytearray(body[1:])))
    except (DecodeError, TLSError, SyntaxError, AssertionError, IndexError) as err:
        raise NotTls(f"the ClientHello cannot be parsed (split over records?): {err}") from err
    if hello.getExtension(ENCRYPTED_CLIENT_HELLO) is not None:
        raise NotTls("the ClientHello carries Encrypted Client Hello: its real server is hidden")
    sni = hello.getExtension(ExtensionType.server_name)
    names = list(sni.hostNames) if sni is not None else []
    if not names:
        return Hello(server_name=None)
    if len(names) > 1:
        # RFC 6066 allows one name per type; a second could be the one a server picks.
        raise NotTls(f"the ClientHello names {len(names)} servers; one is allowed")
    try:
        return Hello(server_name=bytes(names[0]).decode("ascii"))
    except UnicodeDecodeError as err:
        raise NotTls("the server name is not ASCII") from err
