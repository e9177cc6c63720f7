"""The intercepted path: for a host bound to a secret, the proxy ends the command's TLS with
a leaf of the run's CA, reads HTTP/1.1 with llhttp (wire.py), swaps placeholders in request headers
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

from sprawl_orch.egress.rules import AUTHORITY, normal_host
from sprawl_orch.secrets import handoff, wire
from sprawl_orch.secrets import head as one_pass
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.swap import Scanner, scrub_found, swap_headers
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
# Response headers the proxy sets itself: the body is re-framed after scrubbing (chunked, or
# a small one read whole and sent with its new length: _answer).
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive"})
# ... but for an answer without a body (HEAD's, 304) other than 204: its length is the GET's.
_FRAMING_EMPTY = _FRAMING - {b"content-length"}
_END = b"\r\n\r\n"  # the last header's line end and the empty line (head.answer)


# The largest body of a stated length read whole before its head goes out (_answer).
WHOLE = 64 * 1024


class Cut(Exception):
    """The intercepted connection ends here (said in the flow's record)."""


class Session:
    """One intercepted connection: many requests on it (keep-alive), one at a time."""

    def __init__(self, run: SecretRun, flow: Flow, client: TlsEnd, upstream: TlsEnd) -> None:
        self.run = run
        self.flow = flow
        self.client = client
        self.upstream = upstream
        # What each request would otherwise work out again (a share of its CPU,
        # benchmarks/secrets_proxy.py): the run's bindings never change, nor the tunnel's host.
        self.bound = run.bound_to(flow.host, flow.port)
        self.down = wire.Reader(False, _HOP)  # the command's side
        self.requests = one_pass.Requests(self.bound, _HOP, _UNSCANNABLE | {b"expect"})
        # The real host's side; its reader gathers what decides how a head is written
        # (head.py): the framing headers and Content-Encoding.
        self.up = wire.Reader(True, _FRAMING | {b"content-encoding"})
        self.others = tuple(s for s in run.secrets if s not in self.bound)
        self.where = f"{flow.host}:{flow.port}"  # how the result names where it went
        self.placeholders = {s.placeholder: s.placeholder for s in run.secrets}
        # ... and each spelled otherwise (disguise.py): found in a body, counted, never swapped
        self.spelled = [d for ways in run.spellings.values() for d in ways]
        # Host lines already checked for an origin-form request (the same bytes, the same
        # answer: _same_host).
        self.hosts_ok: set[bytes] = set()

    def _event(self, reader: wire.Reader, end: TlsEnd) -> wire.Event:
        while not reader.events:
            # About to wait for a peer: what is queued for either side goes out first. Only
            # a read of the upstream that cannot wait skips the command's flush: an answer's
            # body already arrived behind its head then goes out with it, one write and one
            # wake-up of the command instead of two.
            if self.client.queued and not (end is self.upstream and end.ready()):
                self.client.flush()
            if self.upstream.queued:
                self.upstream.flush()
            data = end.read()
            if not data:
                return reader.eof()
            reader.feed(data)
        event = reader.events.popleft()
        if isinstance(event, wire.Bad):
            side = "the upstream" if reader is self.up else "the command"
            raise Cut(f"{side} sent {event.reason}")
        return event

    def carry(self, client_fd: int, client_early: bytes, up_fd: int, up_early: bytes) -> None:
        """The whole connection after both handshakes, on its own thread (handoff.py):
        blocking reads and writes on the two sockets."""
        self.client.attach(client_fd, client_early)
        self.upstream.attach(up_fd, up_early)
        try:
            self.serve()
            self.upstream.flush()
            self.client.flush()
        except wire.Malformed as err:
            _answered(self.client)
            raise Cut(f"HTTP/1.1 through the interception failed: {err}") from err
        except Cut:
            # A refused request read from the same record as the one before it: that one's
            # answer (scrubbed, queued) still goes out; it was dropped with the connection.
            _answered(self.client)
            raise
        self.client.close()

    def serve(self) -> None:
        while True:
            request = self._event(self.down, self.client)
            if isinstance(request, wire.Closed):
                return
            if not isinstance(request, wire.Head):
                raise Cut(f"unexpected {type(request).__name__} from the command")
            if not self._one(request):
                return

    def _one(self, request: wire.Head) -> bool:
        """One request and its answer; whether the connection carries another."""
        bound = self.bound
        host = self.where
        target = request.target
        self._same_host(request)
        echoes: dict[bytes, bytes] = {}
        fast = self.requests.head(request, echoes)  # head.py, or the parsed way
        raw = request.headers
        if any(k in _HOP for k, _ in request.special):
            raw = [(k, v) for k, v in raw if k not in _HOP]
        if fast is None:
            headers, used = swap_headers(raw, bound, echoes)
        else:
            out, used = fast
        body: Scanner | None = None  # made for a request that has one
        sent = False
        try:
            if request.expects_continue:
                self.client.write(wire.CONTINUE)
            # Every request here asks identity, not only one carrying the value: a bound
            # host that keeps what it received (a request bin, a debug page) serves it back
            # to a later request that carries none, and a gzip answer to that passed unread
            # (tests/secrets/test_attacks.py).
            # Range likewise, on every request: each response is scanned on its own, and
            # ranged answers (to the request itself, or later to a stored echo) handed the
            # value back in pieces shorter than any needle, 10 bytes at a time. A server may
            # answer any request whole (RFC 9110 §14.2); a resumed download to a bound host
            # starts over.
            if fast is None:
                headers = [(k, v) for k, v in headers if k != b"expect" and k not in _UNSCANNABLE]
                headers.append((b"accept-encoding", b"identity"))
                out = wire.request_head(request.method, target, headers)  # Malformed: not sent
            sent = True
            self.upstream.write(out)
            while True:
                event = self._event(self.down, self.client)
                if isinstance(event, wire.Body):
                    body = body or Scanner(self.placeholders, self.spelled)
                    body.feed(event.data)
                    self.upstream.write(wire.chunk(event.data) if request.chunked else event.data)
                elif isinstance(event, wire.End):
                    if request.chunked:
                        self.upstream.write(wire.LAST_CHUNK)
                    # The request is whole: it goes out now, and the counting below and the
                    # answer's set-up run while the upstream works on it, not before it sees it.
                    self.upstream.flush()
                    break
                else:
                    raise Cut("the command closed in the middle of its request")
        finally:
            # The counting only records (it never stops a request): after the request went
            # upstream, not on its path (benchmarks/secrets_proxy.py), in the order it was
            # counted before it, and also when the request is cut or never sent (Malformed).
            # A placeholder in the URL, or left as it is in a header (another secret's, or in
            # a header's name), is counted.
            self.run.check_plain(host, "url", target, bound)
            self.run.check_headers(host, raw, self.others)
            if sent:  # the bound secret's placeholder spelled so no swap finds it (run.py)
                self.run.check_bound(host, out, raw, bound, self.requests.silent)
            for name in used if sent else ():
                self.run.injected(name, host)
            # Also when the request is cut: its pieces went upstream as they came (a
            # placeholder in one went uncounted; tests/secrets/test_attacks_scrub.py).
            found = body.found if body is not None else ()
            for secret in self.run.secrets if found else ():
                if secret.placeholder in found:
                    self.run.leak(secret.name, host, "request body (never swapped)")
        return self._answer(request, echoes)

    def _whole(self) -> bytes:
        """The answer's body to its end, as it came (scrubbed whole by the caller)."""
        out = []
        while True:
            event = self._event(self.up, self.upstream)
            if isinstance(event, wire.Body):
                out.append(event.data)
            elif isinstance(event, wire.End):
                return b"".join(out)
            else:
                raise Cut("the upstream closed in the middle of its response")

    def _same_host(self, request: wire.Head) -> None:
        """The request must be for the host the tunnel was checked for. A CDN routes by Host:
        `CONNECT api.bound.example` then `Host: attacker.example` (on the same CDN) would
        carry the value to the attacker's origin (domain fronting, one layer up from SNI)."""
        hosts = [v for k, v in request.headers if k == b"host"]
        if len(hosts) > 1:
            # A front end may route by the first of two, this check by either.
            raise Cut("a request with more than one Host header")
        origin = request.target.startswith(b"/") or request.target == b"*"
        if origin and hosts and hosts[0] in self.hosts_ok:
            return
        said = [hosts[0].decode("latin-1") if hosts else ""]
        target = request.target.decode("latin-1")
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
        if origin and hosts and len(self.hosts_ok) < 8:  # spellings of one name: a few
            self.hosts_ok.add(hosts[0])

    def _answer(self, request: wire.Head, echoes: dict[bytes, bytes]) -> bool:
        # Every form sent in this run, not this request's only: a stored echo of git's
        # re-encoded Basic blob came back to a later request, on another connection.
        forms = self.run.sent_forms(echoes)
        hidden = self.run.disguises
        head = request.method == b"HEAD"
        self.up.no_body = head
        while True:
            event = self._event(self.up, self.upstream)
            if isinstance(event, wire.Head) and event.status >= 200:
                break
            if isinstance(event, (wire.Head, wire.End)):
                continue  # a 100 the command was already given, or 1xx it did not ask for
            raise Cut(f"the upstream answered {type(event).__name__}")
        # No body: HEAD's answer (its Content-Length says the GET's), 204, 304. Otherwise the
        # body goes chunked (scrubbing may change its length) or whole with its new length
        # (below), or to an HTTP/1.0 client until the connection closes.
        empty = head or event.status in (204, 304)
        chunked = not empty and request.version == "1.1"
        # A HEAD's answer ends the connection too: llhttp cannot be told its response has
        # no body, so the reader stops at its head (wire.Reader.no_body).
        keep = request.keep_alive and event.keep_alive and not head and (empty or chunked)
        # The head scrubbed and written in one pass before the body is read (head.py).
        drop = _FRAMING_EMPTY if empty and event.status != 204 else _FRAMING
        got = one_pass.answer(event, drop, forms, hidden)
        if got is None:
            raise Cut(
                "the upstream sent a compressed response (asked for identity) on an "
                "intercepted connection; it could hold the value unseen, so it was not "
                "passed on"
            )
        written, in_head = got
        headers = []  # its framing headers
        whole: bytes | None = None
        echoed = False
        if chunked and wire.length(event.special, WHOLE + 1) <= WHOLE:
            # A small body of a stated length is read to its end first, scrubbed, and sent
            # with its own length and its head in one write: chunked, a head the upstream
            # sent apart from its body went out alone (two writes, two wake-ups of the
            # command), and the chunk framing was work on both sides
            # (benchmarks/secrets_proxy.py). The command cannot use the head before the
            # body in any case; a reverse proxy buffers so too (nginx's proxy_buffering).
            # Scrubbed as one piece: what a Scanner fed it and ended would give.
            whole, echoed = scrub_found(self._whole(), forms, hidden)
            headers.append((b"content-length", b"%d" % len(whole)))
        elif chunked:
            headers.append((b"transfer-encoding", b"chunked"))
        if not keep:
            headers.append((b"connection", b"close"))
        # The reason was scrubbed with the head: an error page's "401 bad token …".
        self.client.write(written + b"".join([b"\r\n" + k + b": " + v for k, v in headers]) + _END)
        if whole is not None:
            self.client.write(whole)
        else:
            echoed = self._stream(chunked, Scanner(forms, hidden))
        echoed = echoed or in_head  # counted only for a body before (test_attacks_scrub.py)
        if not self.down.events:
            # No pipelined request in hand (its answer would go out with this one): the
            # answer goes now, the record's counting after it.
            self.client.flush()
        if echoed:
            self.run.echoed(f"{self.flow.host}:{self.flow.port}")
        return keep

    def _stream(self, chunked: bool, scrub: Scanner) -> bool:
        """The answer's body passed on as it comes, scrubbed; whether the scrub found any."""
        while True:
            event = self._event(self.up, self.upstream)
            if isinstance(event, wire.Body):
                data = scrub.feed(event.data)
                if data:
                    self.client.write(wire.chunk(data) if chunked else data)
            elif isinstance(event, wire.End):
                rest = scrub.end()
                if rest:
                    self.client.write(wire.chunk(rest) if chunked else rest)
                if chunked:
                    self.client.write(wire.LAST_CHUNK)
                return bool(scrub.found)
            else:
                raise Cut("the upstream closed in the middle of its response")


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
        await handoff.on_thread((flow.reader, flow.writer), flow.upstream, session.carry)
    except handoff.NoHandoff as err:
        raise Cut(str(err)) from None
    finally:
        # After the thread returned (handoff waits for it, cancelled too): the counts are final.
        flow.up += upstream.raw_out
        flow.down += client.raw_out


def _answered(client: TlsEnd) -> None:
    # The command may be gone already: then nothing is owed to it.
    with contextlib.suppress(ssl.SSLError, OSError):
        client.flush()


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
