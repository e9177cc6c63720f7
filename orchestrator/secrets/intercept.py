"""The intercepted path: for a host bound to a secret, the proxy ends the command's TLS with
a leaf of the run's CA, reads HTTP/1.1 with h11, swaps placeholders in request headers
(swap.py) and speaks TLS to the real host, verifying it against the host's trust store.

What comes back is scrubbed: an upstream that echoes a request (httpbin's /headers, a debug
endpoint, an error page quoting the Authorization header) would otherwise hand the value to
the command. Responses to a request that carried a value are asked uncompressed
(`accept-encoding: identity`) so the value can be found; one sent compressed anyway is cut
(502), not passed unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from typing import TYPE_CHECKING, Any

import h11

from sprawl_orch.egress.rules import AUTHORITY, normal_host
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.swap import Scanner, holds, swap_headers
from sprawl_orch.secrets.tls import TlsEnd

if TYPE_CHECKING:
    from sprawl_orch.egress.flows import Flow

# What a Host header or an absolute-form target's authority may be: a name or an IP literal and
# an optional port (RFC 9110 §7.2 has no userinfo there).
_ABSOLUTE = re.compile(r"(?i)https?://([^/?#]*)(?:[/?#].*)?", re.DOTALL)

# Request headers that would let a response hold the value where no scan finds it: compressed,
# or in pieces (tests/secrets/test_attacks.py).
_UNSCANNABLE = frozenset({b"accept-encoding", b"range", b"if-range"})

# Request headers the proxy does not pass on (hop-by-hop; RFC 9110 §7.6.1).
_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"upgrade"})


def _scrub(data: bytes, forms: dict[bytes, bytes]) -> bytes:
    for form, placeholder in forms.items():
        data = data.replace(form, placeholder)
    return data


class Cut(Exception):
    """The intercepted connection ends here (said in the flow's record)."""


class Session:
    """One intercepted connection: many requests on it (keep-alive), one at a time."""

    def __init__(self, run: SecretRun, flow: Flow, client: TlsEnd, upstream: TlsEnd) -> None:
        self.run = run
        self.flow = flow
        self.client = client
        self.upstream = upstream
        self.down = h11.Connection(h11.SERVER)  # the command's side
        self.up = h11.Connection(h11.CLIENT)  # the real host's side

    async def _event(self, conn: h11.Connection, end: TlsEnd) -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            # About to wait for a peer: what is queued for either side goes out first.
            await self.client.flush()
            await self.upstream.flush()
            conn.receive_data(await end.read())

    async def serve(self) -> None:
        while True:
            request = await self._event(self.down, self.client)
            if isinstance(request, h11.ConnectionClosed):
                return
            if not isinstance(request, h11.Request):
                raise Cut(f"unexpected {type(request).__name__} from the command")
            await self._one(request)
            if self.down.our_state is not h11.DONE or self.up.their_state is not h11.DONE:
                return
            self.down.start_next_cycle()
            self.up.start_next_cycle()

    async def _one(self, request: h11.Request) -> None:
        bound = self.run.bound_to(self.flow.host, self.flow.port)
        host = f"{self.flow.host}:{self.flow.port}"  # how the result names where it went
        target = bytes(request.target)
        self._same_host(request)
        self.run.check_plain(host, "url", target, bound)
        raw = [(k, v) for k, v in request.headers if k.lower() not in _HOP]
        echoes: dict[bytes, bytes] = {}
        headers, used = swap_headers(raw, bound, echoes)
        # A placeholder of a secret not bound here stays what it is (and is counted).
        for key, value in raw:
            for other in self.run.secrets:
                if other not in bound and holds(value, other.placeholder):
                    self.run.leak(other.name, host, f"header {key.decode('latin-1')}")
        if self.down.client_is_waiting_for_100_continue:
            await self.client.write(
                self.down.send(h11.InformationalResponse(status_code=100, headers=[]))
            )
        headers = [(k, v) for k, v in headers if k != b"expect"]
        # Every request here asks identity, not only one carrying the value: a bound host that
        # keeps what it received (a request bin, a debug page) serves it back to a later
        # request that carries none, and a gzip answer to that passed unread
        # (tests/secrets/test_attacks.py).
        # Range likewise, on every request: each response is scanned on its own, and ranged
        # answers (to the request itself, or later to a stored echo) handed the value back
        # in pieces shorter than any needle, 10 bytes at a time. A server may answer any
        # request whole (RFC 9110 §14.2); a resumed download to a bound host starts over.
        headers = [(k, v) for k, v in headers if k not in _UNSCANNABLE]
        headers.append((b"accept-encoding", b"identity"))
        for name in used:
            self.run.injected(name, host)
        out = h11.Request(method=request.method, target=target, headers=headers)
        await self.upstream.write(self.up.send(out) or b"")
        body = Scanner({s.placeholder: s.placeholder for s in self.run.secrets})
        while True:
            event = await self._event(self.down, self.client)
            if isinstance(event, h11.Data):
                body.feed(bytes(event.data))
                await self.upstream.write(self.up.send(event) or b"")
            elif isinstance(event, h11.EndOfMessage):
                await self.upstream.write(self.up.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise Cut("the command closed in the middle of its request")
        for secret in self.run.secrets:
            if secret.placeholder in body.found:
                self.run.leak(secret.name, host, "request body (never swapped)")
        await self._answer(request.method, used, echoes)

    def _same_host(self, request: h11.Request) -> None:
        """The request must be for the host the tunnel was checked for. A CDN routes by Host:
        `CONNECT api.bound.example` then `Host: attacker.example` (on the same CDN) would
        carry the value to the attacker's origin (domain fronting, one layer up from SNI)."""
        names = {k.lower(): v for k, v in request.headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            # The same smuggling refusal as the plain path (flows.py): an upstream that frames
            # by Content-Length would read the rest as a request never checked here.
            raise Cut("a request with both Transfer-Encoding and Content-Length")
        said = [names.get(b"host", b"").decode("latin-1")]
        target = bytes(request.target).decode("latin-1")
        if not target.startswith("/") and target != "*":
            absolute = _ABSOLUTE.match(target)
            said.append(absolute.group(1) if absolute else "")
        for authority in said:
            # Only `name[:port]` or `[v6][:port]`, nothing else: urlsplit reads past '@', '\\',
            # '/', '#' and '?' to a hostname, while a front end may route by the part before
            # them (`Host: evil.example@bound` passed the check and reached the upstream as
            # it was written; tests/secrets/test_attacks.py).
            shape = AUTHORITY.fullmatch(authority)
            name = normal_host(shape.group(1).strip("[]")) if shape else ""
            port = int(shape.group(2)) if shape and shape.group(2) else self.flow.port
            if (name, port) != (self.flow.host.strip("[]"), self.flow.port):
                raise Cut(
                    f"a request for {authority!r} inside the tunnel to "
                    f"{self.flow.host}:{self.flow.port} (Host must name the tunnel's host)"
                )

    async def _answer(self, method: bytes, used: set[str], echoes: dict[bytes, bytes]) -> None:
        forms = dict(self.run.forms)
        # Every form sent in this run, not this request's only: a stored echo of git's
        # re-encoded Basic blob came back to a later request, on another connection.
        forms.update(self.run.sent_forms(echoes))
        while True:
            event = await self._event(self.up, self.upstream)
            if isinstance(event, h11.InformationalResponse):
                continue  # a 100 the command was already given, or 1xx it did not ask for
            if isinstance(event, h11.Response):
                break
            raise Cut(f"the upstream answered {type(event).__name__}")
        headers = []
        for key, value in event.headers:
            key, value = _scrub(key, forms), _scrub(value, forms)
            if key == b"content-length" and method != b"HEAD":
                continue  # scrubbing may change the length: the body goes chunked
            if key == b"content-encoding" and value.strip().lower() not in (b"identity", b""):
                # Every Content-Encoding line, not the last one only (a second `identity`
                # line hid a gzip body), on every response: a stored echo comes back to a
                # request that carried no value.
                raise Cut(
                    "the upstream sent a compressed response (asked for identity) on an "
                    "intercepted connection; it could hold the value unseen, so it was not "
                    "passed on"
                )
            headers.append((key, value))
        response = h11.Response(
            status_code=event.status_code,
            headers=headers,
            reason=_scrub(bytes(event.reason), forms),  # an error page's "401 bad token …"
        )
        await self.client.write(self.down.send(response) or b"")
        scrub = Scanner(forms)
        while True:
            event = await self._event(self.up, self.upstream)
            if isinstance(event, h11.Data):
                data = scrub.feed(bytes(event.data))
                if data:
                    await self.client.write(self.down.send(h11.Data(data=data)) or b"")
            elif isinstance(event, h11.EndOfMessage):
                rest = scrub.end()
                if rest:
                    await self.client.write(self.down.send(h11.Data(data=rest)) or b"")
                await self.client.write(self.down.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise Cut("the upstream closed in the middle of its response")
        if scrub.found:
            self.run.echoed(f"{self.flow.host}:{self.flow.port}")


async def intercept(run: SecretRun, flow: Flow, first: bytes) -> None:
    """The checked tunnel `flow` (SNI = CONNECT host, upstream TCP open), its ClientHello
    `first` in hand, carried through the interception instead of the byte relay."""
    assert flow.upstream is not None
    client = TlsEnd(
        flow.reader, flow.writer, run.ca.server_context(flow.host), server_side=True, first=first
    )
    up_reader, up_writer = flow.upstream
    upstream = TlsEnd(
        up_reader, up_writer, run.upstream_context(), server_side=False, hostname=flow.host
    )
    try:
        # Both handshakes at once: nothing is sent upstream before a request is read, and
        # one after the other they added a second handshake's round trips to every new
        # connection (benchmarks/secrets_proxy.py).
        theirs, ours = await asyncio.gather(
            client.handshake(), upstream.handshake(), return_exceptions=True
        )
        failed = (ssl.SSLError, OSError, TimeoutError)
        if isinstance(ours, failed):
            raise Cut(f"the real {flow.host} failed TLS verification or handshake: {ours}")
        if isinstance(theirs, failed):
            raise Cut(f"the command's TLS did not accept the run's CA: {theirs}")
        for other in (theirs, ours):
            if isinstance(other, BaseException):
                raise other
        session = Session(run, flow, client, upstream)
        try:
            await session.serve()
            await upstream.flush()
            await client.flush()
        except h11.ProtocolError as err:
            await _answered(client)
            raise Cut(f"HTTP/1.1 through the interception failed: {type(err).__name__}") from err
        except Cut:
            # A refused request read from the same record as the one before it: that one's
            # answer (scrubbed, queued) still goes out; it was dropped with the connection.
            await _answered(client)
            raise
        await client.close()
    finally:
        flow.up += upstream.raw_out
        flow.down += client.raw_out


async def _answered(client: TlsEnd) -> None:
    # The command may be gone already: then nothing is owed to it.
    with contextlib.suppress(ssl.SSLError, OSError):
        await client.flush()


class Interception:
    """The proxy's Interceptor (egress/interceptor.py) for one run."""

    def __init__(self, run: SecretRun) -> None:
        self.run = run

    def wants(self, host: str, port: int) -> bool:
        return self.run.wants(host, port)

    async def relay(self, flow: Flow, first: bytes) -> None:
        from sprawl_orch.egress.flows import Refused

        try:
            await intercept(self.run, flow, first)
        except Cut as cut:
            raise Refused(f"interception: {cut}") from None
        except (OSError, ssl.SSLError) as err:
            # Only the type and errno: an error's text could quote a header it choked on.
            raise Refused(f"interception: {type(err).__name__} {err.errno}") from None

    def plain_request(self, host: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.run.plain_request(host, target, headers)

    def report(self) -> dict[str, Any]:
        return self.run.report()

    def sentence(self) -> str:
        return self.run.sentence()
