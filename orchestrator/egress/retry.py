"""A TLS 1.3 HelloRetryRequest's second ClientHello, checked as the first was.

A server that wants another key share answers the first ClientHello with a HelloRetryRequest
and the client sends a second ClientHello. RFC 8446 §4.1.2 asks the client to keep it the
same, but servers do not check: an OpenSSL server's server-name processing reads the second
(openssl/openssl#32472), so a client naming a listed host first and another one second was
served the other (domain fronting past the SNI check; tests/unit/test_egress_attacks_retry.py).
Neither hello is encrypted, so the proxy reads the server's first record (in the loop, before
the relay's threads take the tunnel): a retry goes back to the client and the client's next
handshake record must be a ClientHello naming the CONNECT host too. The client's records
before it that a client may send there (ChangeCipherSpec, alerts, early data the server
skips) pass unread; nothing is sent upstream after the first hello until this is decided.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sprawl_orch.egress.hello import RECORD_HEADER, NotTls, record_length

# ServerHello.random of a HelloRetryRequest: SHA-256 of "HelloRetryRequest" (RFC 8446 §4.1.3).
RETRY_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")
_HANDSHAKE = 22
_SERVER_HELLO = 2
# record header (5), handshake type (1) and length (3), legacy_version (2): then the random.
_RANDOM_AT = RECORD_HEADER + 4 + 2
_PASSED = frozenset({20, 21, 23})  # change_cipher_spec, alert, application_data (early data)
# What may pass before the second hello: a change_cipher_spec, and early data sent before the
# retry came (a server's max_early_data is commonly 16 KiB). Unbounded, a client could make the
# proxy hold what it sends for the whole 30 s deadline (gigabytes over a loopback).
MAX_PASSED = 256 * 1024

Read = Callable[[], Awaitable[bytes]]
Check = Callable[[bytes], None]
Count = Callable[[int], None]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_CHUNK = 256 * 1024


def is_retry(record: bytes) -> bool:
    """The server's record is a HelloRetryRequest."""
    return (
        len(record) >= _RANDOM_AT + 32
        and record[0] == _HANDSHAKE
        and record[RECORD_HEADER] == _SERVER_HELLO
        and record[_RANDOM_AT : _RANDOM_AT + 32] == RETRY_RANDOM
    )


async def _record(have: bytes, read: Read) -> tuple[bytes, bytes]:
    """One whole record (any type) from `have` then `read`: (the record, what followed); what
    was read when the peer closed first, with b"" after it."""
    buffer = have
    while len(buffer) < RECORD_HEADER:
        if not (more := await read()):
            return buffer, b""
        buffer += more
    end = RECORD_HEADER + _length(buffer)
    while len(buffer) < end:
        if not (more := await read()):
            return buffer, b""
        buffer += more
    return buffer[:end], buffer[end:]


async def server_first(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """The upstream's first record, whole (or what came before it closed), and whether it is a
    HelloRetryRequest. Read exactly: what follows stays in the stream for the relay, so the
    client gets the rest of the server's flight only once the tunnel's relay holds it."""
    head = b""
    try:
        head = await reader.readexactly(RECORD_HEADER)
        record = head + await reader.readexactly(_length(head))
    except asyncio.IncompleteReadError as short:
        return head + short.partial, False
    return record, is_retry(record)


async def second_hello(pending: bytes, read: Read, check: Check) -> bytes:
    """The client's bytes after a retry, up to and including its second ClientHello record,
    which `check` refuses unless it names the CONNECT host; the records a client may send
    before it pass. Raises NotTls when the next handshake record is not a whole ClientHello."""
    passed = b""
    rest = pending
    while True:
        record, rest = await _record(rest, read)
        if len(record) < RECORD_HEADER or len(record) < RECORD_HEADER + _length(record):
            raise NotTls(f"the client closed after {len(passed) + len(record)} bytes of its retry")
        if record[0] in _PASSED:
            passed += record
            if len(passed) > MAX_PASSED:
                raise NotTls(f"more than {MAX_PASSED} bytes before the retried ClientHello")
            continue
        record_length(record)  # a handshake record of a plausible size, else NotTls
        check(record)
        return passed + record + rest


def _length(record: bytes) -> int:
    return int.from_bytes(record[3:5], "big")


async def through(
    first: bytes,
    ends: tuple[Streams, Streams],
    check: Check,
    counts: tuple[Count, Count],
    timeout: float,
) -> bytes:
    """Send the checked ClientHello record of `first` (alone) upstream, carry the server's
    first record back, and on a retry check the client's second hello (`check`, as the first
    was). What the client sent past the hello(s) is returned: it goes upstream next. NotTls
    or TimeoutError (no answer, no second hello within `timeout` each) end the tunnel."""
    (up_reader, up_writer), (client_reader, client_writer) = ends
    up, down = counts
    end = RECORD_HEADER + record_length(first)
    up_writer.write(first[:end])
    up(end)
    await up_writer.drain()
    answer, retried = await asyncio.wait_for(server_first(up_reader), timeout)
    client_writer.write(answer)
    down(len(answer))
    await client_writer.drain()
    if not retried:
        return first[end:]
    return await asyncio.wait_for(
        second_hello(first[end:], lambda: client_reader.read(_CHUNK), check), timeout
    )
