"""One TLS end over an asyncio stream, driven through ssl.MemoryBIO (the ssl module does all
of TLS; this only moves bytes). asyncio's own start_tls can't be used on the client's side:
the proxy has already read the ClientHello (to check its SNI), and start_tls would not see
those bytes again; a MemoryBIO is fed them first."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

CHUNK = 256 * 1024
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
        if first:
            self._in.write(first)
        self.raw_in = len(first)
        self._queued = bytearray()
        self.raw_out = 0

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            self.writer.write(data)
            self.raw_out += len(data)
            await self.writer.drain()

    async def _fill(self) -> None:
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
                    await self._flush()
                    await self._fill()
                    continue
                await self._flush()
                return

        await asyncio.wait_for(shake(), HANDSHAKE_TIMEOUT)

    async def read(self) -> bytes:
        """Decrypted bytes; b"" at the end (close_notify, or the peer just went)."""
        while True:
            if not self.tls.pending() and not self._in.pending and not self._in.eof:
                # Nothing in hand to decrypt: wait for the peer first, rather than raise and
                # catch SSLWantReadError on every read (a share of the intercepted
                # request's CPU, benchmarks/secrets_proxy.py).
                await self._flush()
                await self._fill()
            try:
                return self._more(self.tls.read(CHUNK))
            except ssl.SSLWantReadError:
                await self._flush()
                if self._in.eof:
                    return b""
                await self._fill()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    def _more(self, data: bytes) -> bytes:
        """`data` and every whole record already in hand after it. SSL_read hands out one
        record at a time: a response whose head and body came as two records in one segment
        was parsed as a head alone, whose wait for the body flushed the head to the command
        by itself."""
        if not data:
            return data
        out = bytearray(data)
        while len(out) < CHUNK and (self.tls.pending() or self._in.pending):
            try:
                more = self.tls.read(CHUNK - len(out))
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break  # nothing more in hand; the end, if it is one, comes with the next read
            if not more:
                break
            out += more
        return bytes(out)

    async def write(self, data: bytes) -> None:
        """Queued; sent once the queue passes FLUSH_AT or at `flush` (the session flushes
        before it waits for any peer). A response's head, body and end went out as three
        sends before, and a small keep-alive request cost twice the tunnel's time
        (benchmarks/secrets_proxy.py); a streamed response still flows, since every wait
        for the upstream flushes what came before it."""
        self._queued += data
        if len(self._queued) >= FLUSH_AT:
            await self.flush()

    async def flush(self) -> None:
        if not self._queued:
            return
        view = memoryview(bytes(self._queued))
        self._queued.clear()
        while view:
            sent = self.tls.write(view)
            view = view[sent:]
        await self._flush()

    async def close(self) -> None:
        # The peer may already be gone: then there is no close_notify to exchange, and the
        # flow closes the socket next anyway.
        with contextlib.suppress(ssl.SSLError, OSError):
            await self.flush()
            self.tls.unwrap()
        with contextlib.suppress(OSError):  # the peer may be gone: the flow closes it next
            await self._flush()
