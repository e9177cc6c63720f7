"""One client connection through the proxy: its request head read by h11, decided, then a
checked tunnel (CONNECT) or one forwarded plain-HTTP request. Every path ends in an Egress
record; a refusal answers 403 (or 502 when the upstream cannot be reached) with the reason."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import time
from typing import Protocol
from urllib.parse import urlsplit

import h11

from sprawl_orch.egress import relay, retry
from sprawl_orch.egress.addresses import host_addresses, refused
from sprawl_orch.egress.hello import RECORD_HEADER, NotTls, parse_hello, record_length
from sprawl_orch.egress.record import Egress
from sprawl_orch.egress.rules import AUTHORITY, IpAddress, Rules, literal, normal_host
from sprawl_orch.egress.workers import Workers

CHUNK = 256 * 1024
# A stream's read buffer: asyncio's 64 KiB default paused the socket every 128 KiB and halved
# a tunnel's throughput (benchmarks/egress_proxy.py); 1 MiB keeps reads large.
STREAM_LIMIT = 1024 * 1024
HEAD_TIMEOUT = 30.0
# Headers that describe one hop (RFC 9110 §7.6.1) or the proxy itself: not passed upstream.
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
    }
)

# The authority of an absolute-form target (`http://host:port/path`), checked as a Host is.
_ABSOLUTE_AUTHORITY = re.compile(r"(?i)[a-z][a-z0-9+.-]*://([^/?#]*)")


class Refused(Exception):
    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


async def system_resolve(host: str, port: int) -> list[IpAddress]:
    """Every address the host's resolver gives for `host` (once; the caller connects to one
    of exactly these)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        # UnicodeError: the idna codec refuses a name with an empty label ('a..example.org'
        # passes a wildcard's suffix test); uncaught, it ended the flow with no record.
        raise Refused(f"{host} does not resolve on the host: {err}", 502) from err
    seen: list[IpAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).partition("%")[0])
        if address not in seen:
            seen.append(address)
    return seen


class Hub(Protocol):
    """What a flow asks of its proxy (proxy.EgressProxy)."""

    rules: Rules
    connect_timeout: float
    splice: bool
    workers: Workers

    async def resolve(self, host: str, port: int) -> list[IpAddress]: ...

    async def relay(self, flow: Flow, first: bytes) -> None: ...

    def plain(self, host: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> None: ...


class Flow:
    def __init__(
        self,
        proxy: Hub,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        started: float,
    ) -> None:
        self.proxy = proxy
        self.reader = reader
        self.writer = writer
        self.started = started
        self.conn = h11.Connection(h11.SERVER)
        self.kind = "http"
        self.host = ""
        self.port = 0
        self.address: str | None = None
        self.up = 0
        self.down = 0
        self.upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def ended(self, reason: str, allowed: bool = True) -> Egress:
        return Egress(
            kind=self.kind,
            host=self.host,
            port=self.port,
            allowed=allowed,
            reason=reason,
            address=self.address,
            bytes_up=self.up,
            bytes_down=self.down,
            duration_s=round(time.monotonic() - self.started, 6),
        )

    async def run(self) -> Egress:
        try:
            try:
                request = await asyncio.wait_for(self._head(), HEAD_TIMEOUT)
            except (h11.RemoteProtocolError, TimeoutError) as err:
                why = str(err) or "no head in time"  # TimeoutError says nothing itself
                raise Refused(f"not an HTTP proxy request: {why}", 400) from err
            if request.method == b"CONNECT":
                self.kind = "connect"
                return await self._connect(request)
            return await self._forward(request)
        except Refused as refusal:
            await self._answer(refusal)
            return self.ended(refusal.reason, allowed=False)
        finally:
            if self.upstream is not None:
                self.upstream[1].close()

    async def refuse(self, reason: str, status: int) -> Egress:
        """Answer `status` without reading the request (the proxy's own limits)."""
        await self._answer(Refused(reason, status))
        return self.ended(reason, allowed=False)

    async def _head(self) -> h11.Request:
        while True:
            event = self.conn.next_event()
            if isinstance(event, h11.Request):
                return event
            if event is h11.NEED_DATA:
                data = await self.reader.read(CHUNK)
                self.conn.receive_data(data)
                if not data:
                    raise Refused("the client closed before a request", 400)
            else:
                raise Refused(f"unexpected {type(event).__name__} before a request", 400)

    async def _answer(self, refusal: Refused) -> None:
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return  # a tunnel already answered 200: closing is the only answer left
        body = f"sprawl-orch egress proxy refused: {refusal.reason}\n".encode()
        response = h11.Response(
            status_code=refusal.status,
            headers=[
                ("content-type", "text/plain; charset=utf-8"),
                ("content-length", str(len(body))),
                ("connection", "close"),
            ],
        )
        try:
            self.writer.write(self.conn.send(response) or b"")
            self.writer.write(self.conn.send(h11.Data(data=body)) or b"")
            self.writer.write(self.conn.send(h11.EndOfMessage()) or b"")
            await self.writer.drain()
        except (OSError, h11.LocalProtocolError):
            pass  # the refusal could not reach a client that already went: the flow records it

    async def _checked_connect(self) -> None:
        """Decide on (host, port), resolve once, check every address, connect to one."""
        why = self.proxy.rules.decide(self.host, self.port)
        if why is not None:
            raise Refused(f"{self.host}:{self.port} {why}")
        listed = self.proxy.rules.listed_addresses(self.port)
        own = host_addresses()
        address = literal(self.host)
        addresses = (
            [address] if address is not None else await self.proxy.resolve(self.host, self.port)
        )
        if not addresses:
            raise Refused(f"{self.host} resolves to no address", 502)
        for candidate in addresses:
            bad = self.proxy.rules.denied_address(candidate, self.port) or refused(
                candidate, listed, own
            )
            if bad is not None:
                raise Refused(f"{self.host} resolves to {bad}")
        errors: list[str] = []
        for candidate in addresses:
            try:
                self.upstream = await asyncio.wait_for(
                    asyncio.open_connection(str(candidate), self.port, limit=STREAM_LIMIT),
                    self.proxy.connect_timeout,
                )
            except (OSError, TimeoutError) as err:
                errors.append(f"{candidate}: {err or 'timed out'}")
                continue
            self.address = str(candidate)
            return
        raise Refused(f"cannot connect to {self.host}:{self.port} ({'; '.join(errors)})", 502)

    async def _connect(self, request: h11.Request) -> Egress:
        target = request.target.decode("ascii", "replace")
        try:
            parts = urlsplit("//" + target)
            host, port = parts.hostname, parts.port
        except ValueError as err:
            raise Refused(f"CONNECT target {target!r} is not host:port: {err}", 400) from err
        if not host or port is None or not AUTHORITY.fullmatch(target):
            raise Refused(f"CONNECT target {target!r} is not host:port", 400)
        self.host, self.port = normal_host(host), port
        await self._checked_connect()
        self.writer.write(self.conn.send(h11.Response(status_code=200, headers=[])) or b"")
        await self.writer.drain()
        early, _ = self.conn.trailing_data
        try:
            # One deadline for the whole hello, as for the head: a deadline per read let a
            # byte every 29 s hold the upstream connection for days with no SNI decided.
            first = await asyncio.wait_for(self._hello(bytes(early)), HEAD_TIMEOUT)
        except TimeoutError as err:
            raise Refused(f"no whole TLS ClientHello within {HEAD_TIMEOUT:g} s") from err
        await self.proxy.relay(self, first)
        return self.ended("tunnel closed")

    async def _hello(self, early: bytes) -> bytes:
        """The client's first TLS record, its SNI checked against the CONNECT host."""
        buffer = early
        try:
            while len(buffer) < RECORD_HEADER:
                buffer += await self._more(len(buffer))
            length = record_length(buffer)
            while len(buffer) < RECORD_HEADER + length:
                buffer += await self._more(len(buffer))
        except NotTls as err:
            raise Refused(f"the tunnel to {self.host} did not start with TLS: {err}") from err
        self._check_name(buffer[: RECORD_HEADER + length])
        return buffer

    def _check_name(self, record: bytes) -> None:
        """The ClientHello record's SNI equals the CONNECT host (none only for an IP literal)."""
        try:
            hello = parse_hello(record)
        except NotTls as err:
            raise Refused(f"the tunnel to {self.host} did not start with TLS: {err}") from err
        name = hello.server_name
        expected = self.host
        if name is None:
            if literal(expected) is None:
                raise Refused(f"the TLS ClientHello names no server; CONNECT named {expected}")
        elif normal_host(name) != expected:
            raise Refused(f"TLS SNI {name!r} differs from the CONNECT host {expected!r}")

    async def _more(self, have: int) -> bytes:
        data = await self.reader.read(CHUNK)
        if not data:
            raise NotTls(f"the client closed after {have} bytes")
        return data

    async def pipe(self, first: bytes) -> None:
        assert self.upstream is not None
        up_reader, up_writer = self.upstream
        try:  # the hello alone first: a retry's second hello is checked too (retry.py)
            first = await retry.through(
                first,
                (self.upstream, (self.reader, self.writer)),
                self._check_name,
                (self._count_up, self._count_down),
                HEAD_TIMEOUT,
            )
        except NotTls as err:
            raise Refused(f"the retried hello to {self.host}: {err}") from err
        except TimeoutError as err:
            raise Refused(f"no server answer or retried hello in {HEAD_TIMEOUT:g} s") from err
        if self.proxy.splice and await relay.both_ways(
            (self.reader, self.writer),
            self.upstream,
            first,
            self._count_up,
            self._count_down,
            self.proxy.workers.run,
        ):
            return
        up_writer.write(first)
        self.up += len(first)
        await asyncio.gather(
            self._copy(self.reader, up_writer, up=True),
            self._copy(up_reader, self.writer, up=False),
        )

    def _count_up(self, moved: int) -> None:
        self.up += moved

    def _count_down(self, moved: int) -> None:
        self.down += moved

    async def _copy(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, up: bool
    ) -> None:
        try:
            while data := await source.read(CHUNK):
                sink.write(data)
                if up:
                    self.up += len(data)
                else:
                    self.down += len(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except OSError:
            # A reset on either side ends this direction; the other direction and the flow's
            # byte counts still say what went through.
            sink.close()

    async def _forward(self, request: h11.Request) -> Egress:
        """Plain HTTP: one request, its URL's host equal to its Host header, forwarded with
        `connection: close`; the response is carried back byte for byte."""
        target = request.target.decode("ascii", "replace")
        headers = [(k.lower(), v) for k, v in request.headers]
        names = {k for k, _ in headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            # h11 frames the body by Transfer-Encoding and keeps Content-Length; forwarded as
            # both, an upstream that reads by Content-Length takes the rest of the body as a
            # second request the proxy never checked (request smuggling, RFC 9112 §6.3).
            raise Refused("a request with both Transfer-Encoding and Content-Length", 400)
        host_header = next((v.decode("ascii", "replace") for k, v in headers if k == b"host"), "")
        authority = host_header
        if not target.startswith("/"):
            absolute = _ABSOLUTE_AUTHORITY.match(target)
            authority = absolute.group(1) if absolute else target
        for named in filter(None, (host_header, authority)):
            if not AUTHORITY.fullmatch(named):
                # `Host: evil.example@allowed` passed urlsplit's reading (hostname: allowed)
                # and went upstream as written; a front end routing by the part before '@'
                # takes it elsewhere (the secrets attacker's finding, issue 25).
                raise Refused(f"{named!r} is not a host[:port]", 400)
        try:
            by_header = urlsplit("//" + host_header)
            url = urlsplit(target) if not target.startswith("/") else by_header
            if target.startswith("/"):
                path = target
            else:
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            host, port = url.hostname, url.port or 80
        except ValueError as err:
            raise Refused(f"request target {target!r} is not a URL: {err}", 400) from err
        if not target.startswith("/") and url.scheme != "http":
            raise Refused(f"only http:// is forwarded in plain; {url.scheme}:// goes by CONNECT")
        if not host:
            raise Refused(f"request for {target!r} names no host", 400)
        self.host, self.port = normal_host(host), port
        said = (normal_host(by_header.hostname or ""), by_header.port or 80)
        if host_header and said != (self.host, port):
            raise Refused(f"Host header {host_header!r} differs from the URL's {host}:{port}")
        await self._checked_connect()
        assert self.upstream is not None
        up_reader, up_writer = self.upstream
        client = h11.Connection(h11.CLIENT)
        kept = [(k, v) for k, v in headers if k not in _HOP] + [(b"connection", b"close")]
        if not host_header:
            # An HTTP/1.0 request may come without Host; the 1.1 request sent upstream needs
            # one (h11 raised, and the flow ended unrecorded): the checked URL's own.
            kept.append((b"host", f"{host}:{port}".encode("ascii", "replace")))
        self.proxy.plain(self.host, request.target, kept)
        head = client.send(h11.Request(method=request.method, target=path, headers=kept))
        await self._send_up(up_writer, head or b"")
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(CHUNK)
                if not data:
                    raise Refused("the client closed in the middle of its request body", 400)
                self.conn.receive_data(data)
            elif isinstance(event, h11.Data):
                await self._send_up(up_writer, client.send(event) or b"")
            elif isinstance(event, h11.EndOfMessage):
                await self._send_up(up_writer, client.send(h11.EndOfMessage()) or b"")
                break
        # The client's answer comes from upstream now; nothing more of its bytes is read
        # (a pipelined second request to another Host would otherwise go unchecked).
        while data := await up_reader.read(CHUNK):
            self.writer.write(data)
            self.down += len(data)
            await self.writer.drain()
        return self.ended("response forwarded")

    async def _send_up(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        self.up += len(data)
        await writer.drain()
