"""HTTP/1.1 on the intercepted path: read by llhttp (httptools), written back from the parsed
fields. h11 was 0.36 ms of CPU per request and response pair against llhttp's 0.01 ms (one
process, same bytes, load 9 on 2 cores); the intercepted request cost 2.7x the tunnel's, the
bound being 1.5x (benchmarks/secrets_proxy.py).

llhttp (strict, no leniency set) refuses what h11 refused: both Transfer-Encoding and
Content-Length, two Content-Lengths, an obs-folded line, a bare LF or CR as a line end,
whitespace before a header's colon. The framing rules are checked here again on the parsed
headers, so a later llhttp that relaxes one of them does not open the interception to
request smuggling (tests/secrets/test_attacks_parser.py).

Events come out in order, one message after another (a pipelined second request waits
behind the first's answer); a refusal is an event too, so what came before it is served.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import httptools

# The most a message's head may take (h11's own bound was 16 KiB; real heads with cookies
# stay under 16 KiB). httptools keeps a header's pieces until it ends: unbounded, one endless
# header held the proxy's memory.
HEAD_LIMIT = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})


class Malformed(Exception):
    """What was read or would be written is not HTTP/1.1 the interception passes on."""


@dataclass(slots=True)
class Head:
    headers: list[tuple[bytes, bytes]]  # names lower-cased, in order, repeats kept
    method: bytes = b""  # a request's
    target: bytes = b""
    status: int = 0  # a response's
    reason: bytes = b""
    version: str = "1.1"
    keep_alive: bool = True
    chunked: bool = False
    expects_continue: bool = False
    # The headers whose names the Reader watches (FRAMING and its `watch`), in order: what
    # the framing checks and the answer's head (head.py) look at, not every header.
    special: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class Body:
    data: bytes


@dataclass
class End:
    pass


# Every message's end is the same event: one object, not one made per message.
_END = End()


@dataclass
class Bad:
    reason: str


@dataclass
class Closed:
    """The peer's end of the stream, not inside a message that ends with it."""


Event = Head | Body | End | Bad | Closed


class _Stop(Exception):
    """Raised from a callback to end parsing (a refusal, or a response to HEAD)."""

    def __init__(self, event: Bad | None) -> None:
        self.event = event


# What _head's framing checks read: gathered as llhttp hands each header over (one set
# lookup a header), not looked for by a loop over every header in _head.
FRAMING = frozenset({b"content-length", b"transfer-encoding", b"upgrade", b"expect"})


@dataclass
class Reader:
    """One direction of one connection: fed bytes, hands out events."""

    response: bool
    # Header names gathered into Head.special besides FRAMING.
    watch: frozenset[bytes] = FRAMING
    events: deque[Event] = field(default_factory=deque)
    # Set before a response to HEAD is read: llhttp cannot be told there is no body, so the
    # reader stops at its head and the connection ends after it (intercept.py).
    no_body: bool = False
    spent: bool = False
    _in_head: bool = False
    _head_bytes: int = 0  # at most the head's size: what _head's exact measure is skipped by
    # At least the head's size while it lasts: the reads after the one it began in, each all
    # head (feed's refusal). _head_bytes counts the whole read it began in, a request before
    # it too: a pipelined head under the limit that came on in later reads was cut (atkpass).
    _later: int = 0
    _open: bool = False  # between a head and its message's end
    _until_close: bool = False
    _headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    _url: bytes = b""
    _reason: bytes = b""
    _lengths: bool = False  # the last head read had a Content-Length
    _special: list[tuple[bytes, bytes]] = field(default_factory=list)
    _fed: int = 0  # the length of the read being parsed

    def __post_init__(self) -> None:
        self.watch = self.watch | FRAMING
        # Each kind kept under its own name too: _head calls the one kind's getters without
        # an isinstance per message.
        self._parser: httptools.HttpRequestParser | httptools.HttpResponseParser
        if self.response:
            self._responses = self._parser = httptools.HttpResponseParser(self)
        else:
            self._requests = self._parser = httptools.HttpRequestParser(self)

    def feed(self, data: bytes) -> None:
        if self.spent:
            return  # nothing after a refusal or a HEAD's answer is read
        if self._in_head:
            self._head_bytes += len(data)
            self._later += len(data)
        self._fed = len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as up:
            # llhttp pauses after a request that named an Upgrade. The proxy never passes
            # one on (Upgrade and Connection are hop-by-hop, dropped), so the upstream
            # answers it as a plain request; what follows is read by a fresh parser, as h11
            # read it. CONNECT and a 101 are refused at their head (_head).
            if self.response or not self.events or not isinstance(self.events[-1], End):
                self._refuse("an Upgrade inside an intercepted connection")
            else:
                rest = bytes(data)[int(up.args[0]) :] if up.args else b""
                self.__post_init__()
                self.feed(rest)
        except httptools.HttpParserCallbackError as err:
            stop = err.__context__
            if not isinstance(stop, _Stop):
                raise
            self.spent = True
            if stop.event is not None:
                self.events.append(stop.event)
        except httptools.HttpParserError as err:
            # llhttp's reasons are fixed strings ("Invalid header value char"), never the
            # bytes it read (which could hold the value, on the upstream's side).
            self._refuse(f"malformed HTTP/1.1 ({err})")
        if self._in_head and self._later > HEAD_LIMIT and not self.spent:
            self._refuse(f"a message head over {HEAD_LIMIT} bytes")

    def eof(self) -> Event:
        """The peer's end: the end of a response read until close, else Closed."""
        if self._open and self._until_close and not self.spent:
            self.spent = True
            return _END
        return Closed()

    def _refuse(self, reason: str) -> None:
        self.spent = True
        self.events.append(Bad(reason))

    # --- llhttp's callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        # At most what the head can be: the read it began in and every later one (feed).
        self._in_head, self._head_bytes, self._later = True, self._fed, 0
        self._headers, self._url, self._reason, self._special = [], b"", b"", []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        # After the head, llhttp reports a chunked body's trailer fields here: dropped (never
        # passed on, as h11's path dropped them), so nothing rides past the checks below.
        if self._in_head:
            key = name.lower()
            self._headers.append((key, value))
            if key in self.watch:
                self._special.append((key, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        head = self._head()
        if isinstance(head, Bad):
            raise _Stop(head)
        self.events.append(head)
        self._open = True
        if not self.response:
            self._until_close = False
            return
        status = head.status
        no_body = self.no_body or status in _NO_BODY_STATUS or status < 200
        self._until_close = not no_body and not head.chunked and not self._lengths
        if self.no_body and status >= 200:
            self.events.append(_END)
            raise _Stop(None)

    def on_body(self, data: bytes) -> None:
        self.events.append(Body(bytes(data)))

    def on_message_complete(self) -> None:
        self._open = False
        self.events.append(_END)

    def _head(self) -> Head | Bad:
        headers = self._headers
        parser = self._parser
        version = parser.get_http_version()
        if version not in ("1.0", "1.1"):
            return Bad(f"HTTP/{version} on an intercepted connection")
        if self.response:
            method, status = b"", self._responses.get_status_code()
            if status == 101:
                return Bad("a 101 Switching Protocols (no Upgrade was passed on)")
        else:
            method, status = self._requests.get_method(), 0
            if method == b"CONNECT":
                return Bad("a CONNECT inside an intercepted connection")
        if not FIELDS_REFUSED or self._head_bytes > HEAD_LIMIT:
            # Every field joined and searched: only where this llhttp was not seen to refuse
            # CR, LF and NUL in them (FIELDS_REFUSED), or the head may pass the limit (its
            # reads together do). Joined for every message it was ~1 us of each (two a
            # request; benchmarks/secrets_proxy.py).
            flat = b"".join(map(b"".join, headers))
            if b"\r" in flat or b"\n" in flat or b"\0" in flat:  # _forbidden, written out
                return Bad("a header with CR, LF or NUL in it")
            if len(self._url) + len(self._reason) + len(flat) + 4 * len(headers) > HEAD_LIMIT:
                # A head that came whole in one read (feed refuses one spread over reads).
                return Bad(f"a message head over {HEAD_LIMIT} bytes")
        # What the framing checks read, from the watched headers only (every header llhttp
        # handed over was looked at by name as it came: on_header).
        lengths: list[bytes] = []
        codings: list[bytes] = []
        expect: list[bytes] = []
        upgrade = False
        for k, v in self._special:
            if k == b"content-length":
                lengths.append(v)
            elif k == b"transfer-encoding":
                codings.append(v)
            elif k == b"upgrade":
                upgrade = True
            elif k == b"expect":
                expect.append(v.strip().lower())
        self._lengths = bool(lengths)
        if lengths and codings:
            # An upstream that frames by Content-Length would read the rest as a request
            # never checked here (the same refusal as the plain path, flows.py).
            return Bad("a message with both Transfer-Encoding and Content-Length")
        if len(lengths) > 1 or (lengths and not lengths[0].strip().isdigit()):
            return Bad("a message with more than one or a malformed Content-Length")
        if len(codings) > 1 or (codings and codings[0].strip().lower() != b"chunked"):
            return Bad("a Transfer-Encoding other than one `chunked`")
        if upgrade and (codings or any(v.strip() != b"0" for v in lengths)):
            # httptools tells llhttp to skip the body of a message that upgrades: the body
            # would be read as the next request, the upstream reading it as this one's.
            return Bad("an Upgrade request with a body")
        # In the fields' order, not by name: a dataclass __init__ called with nine keywords
        # matched each name, about twice the call (two heads a request).
        return Head(
            headers,
            method,
            self._url,
            status,
            self._reason,
            version,
            bool(parser.should_keep_alive()),
            bool(codings),
            version == "1.1" and expect == [b"100-continue"],
            self._special,
        )


# Each field's bytes as llhttp must refuse them, in a request's and a response's head: a CR,
# an LF or a NUL in a header's name or value, an obs-folded line.
_BROKEN = (b"x\r: a", b"x\n: a", b"x\0: a", b"x: a\rb", b"x: a\nb", b"x: a\0b", b"x: a\r\n b")


def refuses_broken_fields() -> bool:
    """Whether this llhttp (strict, no leniency set) refuses every field in _BROKEN, in a
    request and in a response. _head searches every field for them itself only where it does
    not: a later llhttp that let one through is checked per message as before."""
    for first in (b"GET / HTTP/1.1\r\n", b"HTTP/1.1 200 OK\r\n"):
        for field_ in _BROKEN:
            parser: httptools.HttpRequestParser | httptools.HttpResponseParser
            if first.startswith(b"GET"):
                parser = httptools.HttpRequestParser(_Quiet())
            else:
                parser = httptools.HttpResponseParser(_Quiet())
            try:
                parser.feed_data(first + field_ + b"\r\n\r\n")
            except httptools.HttpParserError:
                continue
            return False
    return True


class _Quiet:
    """A parser's protocol that asks for no callback."""


FIELDS_REFUSED = refuses_broken_fields()


def length(special: list[tuple[bytes, bytes]], default: int) -> int:
    """A message's Content-Length from its watched headers (Head.special; _head lets only
    one plain number through), else `default`."""
    for key, value in special:
        if key == b"content-length":
            return int(value)
    return default


def _forbidden(data: bytes) -> bool:
    return b"\r" in data or b"\n" in data or b"\0" in data


def _lines(first: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    # The value swapped in comes from the caller (config/secrets.py refuses CR, LF and NUL
    # there); checked again at the one place bytes are written, so no value or scrubbed
    # header can start a header or a message of its own: a message of n headers holds
    # exactly n + 2 CRs and LFs, its line ends (counted over the message written, not over
    # the headers joined apart first: a share of every message's path).
    out = [first]
    for name, value in headers:
        if not name:
            raise Malformed("a header to be sent had no name; not sent")
        out += (name, b": ", value, b"\r\n")
    out.append(b"\r\n")
    data = b"".join(out)
    ends = len(headers) + 2
    if data.count(b"\r") != ends or data.count(b"\n") != ends or b"\0" in data:
        raise Malformed("a header to be sent held CR, LF or NUL; not sent")
    return data


def request_head(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    return _lines(method + b" " + target + b" HTTP/1.1\r\n", headers)


def response_head(status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    if _forbidden(reason):
        raise Malformed("a reason phrase held CR, LF or NUL; not sent")
    return _lines(b"HTTP/1.1 %d %s\r\n" % (status, reason), headers)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


LAST_CHUNK = b"0\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
