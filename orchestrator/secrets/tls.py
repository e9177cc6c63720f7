"""One TLS end driven through ssl.MemoryBIO (the ssl module does all of TLS; this only moves
bytes). asyncio's own start_tls can't be used on the client's side: the proxy has already read
the ClientHello (to check its SNI), and start_tls would not see those bytes again; a MemoryBIO
is fed them first.

The handshake runs on the proxy's loop, over the asyncio stream. Then the connection moves to a
thread of its own (handoff.py) and every read and write after it is a blocking call on the
socket's descriptor: the loop's three wake-ups per request (the request, the answer's head and
its body) were most of what the intercepted request cost above the tunnel
(benchmarks/secrets_proxy.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import ssl
from collections.abc import Callable

# What one read of a socket, and one turn of reading the TLS records in hand, takes at most.
# A call that may return n bytes allocates n first (os.read, SSLObject.read) and shrinks the
# result after. At 256 KiB that is above glibc's mmap threshold (128 KiB) until the process
# has freed a larger block (the threshold then rises): in a fresh process os.read took 27 us
# and SSL_read 29 us for a 300-byte message, against 2.5 and 3.5 us at 64 and 16 KiB, ~5
# calls per small request; the benchmark's proxy process happened to have the threshold
# raised (no change there), a cost that depended on the process's history.
CHUNK = 64 * 1024
# The most one SSL_read hands out: one record's plaintext (RFC 8446 §5.1).
RECORD = 16 * 1024
HANDSHAKE_TIMEOUT = 30.0
FLUSH_AT = 64 * 1024


class TlsEnd:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        ctx: ssl.SSLContext,
        *,
        server_side: bool,
        hostname: str | None = None,
        first: bytes = b"",
    ) -> None:
        self.reader = reader
        self.writer = writer
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=hostname
        )
        # ssl.SSLObject's read, write and pending are each a Python frame around the _ssl
        # object's method of the same signature: ~6 a small request, called directly here
        # (the public methods when a later ssl module has no `_sslobj`).
        inner = getattr(self.tls, "_sslobj", self.tls)
        self._read: Callable[[int], bytes] = inner.read
        self._write: Callable[[bytearray], int] = inner.write
        self._pending: Callable[[], int] = inner.pending
        if first:
            self._in.write(first)
        self.raw_in = len(first)
        self.queued = bytearray()  # written, not yet sent (the session checks it)
        self.raw_out = 0
        self.fd = -1  # the socket's descriptor, blocking, once attached (after the handshake)

    # --- the handshake, on the loop ---------------------------------------------------------

    async def _flush_async(self) -> None:
        data = self._out.read()
        if data:
            self.writer.write(data)
            self.raw_out += len(data)
            await self.writer.drain()

    async def _fill_async(self) -> None:
        data = await self.reader.read(CHUNK)
        if data:
            self._in.write(data)
            self.raw_in += len(data)
        else:
            self._in.write_eof()

    async def handshake(self) -> None:
        async def shake() -> None:
            while True:
                try:
                    self.tls.do_handshake()
                except ssl.SSLWantReadError:
                    await self._flush_async()
                    await self._fill_async()
                    continue
                await self._flush_async()
                return

        await asyncio.wait_for(shake(), HANDSHAKE_TIMEOUT)

    # --- after it, on the connection's thread -----------------------------------------------

    def attach(self, fd: int, early: bytes) -> None:
        """From now on the end reads and writes `fd` (blocking); `early` is what the stream
        had read from it but not handed out, fed first."""
        self.fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        # One buffer every socket read lands in: os.read(fd, n) allocates n bytes per call
        # and shrinks them after.
        self._buf = bytearray(CHUNK)
        self._view = memoryview(self._buf)
        if early:
            self._in.write(early)
            self.raw_in += len(early)

    def _send(self) -> None:
        data = self._out.read()
        sent = os.write(self.fd, data)
        self.raw_out += sent  # as it goes: a peer gone mid-way leaves the count of what went
        if sent < len(data):  # the rest as the socket drains (a memoryview only then)
            view = memoryview(data)[sent:]
            while view:
                sent = os.write(self.fd, view)
                self.raw_out += sent
                view = view[sent:]

    def _fill(self) -> None:
        got = os.readv(self.fd, (self._buf,))
        if got:
            self._in.write(self._view[:got])
            self.raw_in += got
        else:
            self._in.write_eof()

    def ready(self) -> bool:
        """Whether the peer's bytes are in hand (decrypted) or at the socket: a read would
        not wait for the peer to send more (unless a record is only partly there)."""
        return bool(self._pending() or self._poll.poll(0))

    def read(self) -> bytes:
        """Decrypted bytes; b"" at the end (close_notify, or the peer just went)."""
        bio = self._in
        while True:
            if not bio.pending and not bio.eof and not self._pending():
                # Nothing in hand to decrypt: wait for the peer first, rather than raise and
                # catch SSLWantReadError on every read (a share of the intercepted
                # request's CPU, benchmarks/secrets_proxy.py).
                if self._out.pending:
                    self._send()
                self._fill()
            try:
                data = self._read(RECORD)
            except ssl.SSLWantReadError:
                self._send()
                if bio.eof:
                    return b""
                self._fill()
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            if data and (bio.pending or self._pending()):
                return self._more(data)
            return data  # one record (most small messages): no copies

    def _more(self, data: bytes) -> bytes:
        """`data` and every whole record already in hand after it. SSL_read hands out one
        record at a time: a response whose head and body came as two records in one segment
        was parsed as a head alone, whose wait for the body flushed the head to the command
        by itself."""
        out = bytearray(data)
        while len(out) < CHUNK and (self._pending() or self._in.pending):
            try:
                more = self._read(min(RECORD, CHUNK - len(out)))
            except ssl.SSLWantReadError:
                break  # nothing more in hand
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                more = b""
            if not more:
                # close_notify (b"" from _ssl's read): the peer's last. The next read says
                # so: it waited at the socket instead, for bytes a peer awaiting our own
                # close_notify never sends (tests/secrets/test_attacks_close_notify.py).
                self._in.write_eof()
                break
            out += more
        return bytes(out)

    def write(self, data: bytes) -> None:
        """Queued; sent once the queue passes FLUSH_AT or at `flush` (the session flushes
        before it waits for any peer). A response's head, body and end went out as three
        sends before, and a small keep-alive request cost twice the tunnel's time
        (benchmarks/secrets_proxy.py); a streamed response still flows, since every wait
        for the upstream flushes what came before it."""
        self.queued += data
        if len(self.queued) >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        queued = self.queued
        if not queued:
            return
        # One record for what is queued (a head and a small body), the queue's own bytes
        # handed to SSL_write without a copy first (it takes a buffer). A memory BIO takes
        # all of it in one call; the loop only guards an SSL_write that took part.
        try:
            sent = self._write(queued)
            while sent < len(queued):
                del queued[:sent]
                sent = self._write(queued)
        finally:
            queued.clear()
        self._send()

    def close(self) -> None:
        # The peer may already be gone: then there is no close_notify to exchange, and the
        # flow closes the socket next anyway.
        with contextlib.suppress(ssl.SSLError, OSError):
            self.flush()
            self.tls.unwrap()
        with contextlib.suppress(OSError):  # the peer may be gone: the flow closes it next
            self._send()
