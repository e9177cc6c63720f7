"""Attacks on the interception by a command that controls every byte it sends (raw CONNECT,
TLS, HTTP/1.1 written by hand) against a bound upstream whose answers a test chooses. Each
test is one way the value could reach another origin or come back to the command."""

from __future__ import annotations

import base64
import gzip
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets.intercept import Interception
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from tests.secrets.raw import Handler, Raw, exchange, raw_upstream

VALUE = "ghp_atk/value+" + "9" * 20 + "=="


def _reply(body: bytes, *extra: bytes, status: bytes = b"200 OK") -> bytes:
    head = [b"HTTP/1.1 " + status, b"content-length: " + str(len(body)).encode(), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _echo(head: bytes, earlier: list[bytes]) -> bytes:
    return _reply(head)


class Rig:
    """A proxy binding GH_PAT (`value`) to the raw upstream; `others`: secrets bound elsewhere,
    whose placeholders are never swapped here (written `<NAME>` in a request)."""

    def __init__(
        self, up: Raw, tmp_path: Path, value: str = VALUE, others: tuple[str, ...] = ()
    ) -> None:
        self.up = up
        where = f"localhost:{up.port}"
        specs = [Spec(name="GH_PAT", hosts=Rules.parse((where,)), host_list=(where,), value=value)]
        specs += [
            Spec(name=name, hosts=Rules.parse(("elsewhere.example",)), host_list=(), value=name * 3)
            for name in others
        ]
        self.run = SecretRun(tuple(specs), upstream_cafile=str(up.ca_file(tmp_path)))
        # 127.0.0.1 allowed: the loopback refusal would otherwise stop the CONNECT first.
        self.proxy = EgressProxy(Rules.parse((where, "127.0.0.1")), secrets=Interception(self.run))
        self.proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        self.proxy.serve(listener)
        self.port = listener.getsockname()[1]
        self.bundle = tmp_path / "bundle.pem"
        self.bundle.write_bytes(self.run.ca.pem)
        self.ph = self.run.env()["GH_PAT"]

    def send(self, request: str) -> bytes:
        data = request.replace("PH", self.ph).replace("PORT", str(self.up.port))
        for name, ph in self.run.env().items():
            data = data.replace(f"<{name}>", ph)
        return exchange(self.port, "localhost", self.up.port, self.bundle, data.encode())

    def received(self) -> bytes:
        return b"\n".join(self.up.heads)


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    handler: Handler = getattr(request, "param", _echo)
    with raw_upstream(handler) as up:
        r = Rig(up, tmp_path)
        try:
            yield r
        finally:
            r.proxy.close()


def _no_value(*texts: bytes) -> None:
    """Not in any response's head or de-chunked (and un-gzipped) body: chunk framing would
    otherwise split a value the command joins back."""
    for text in texts:
        for head, body in _responses(text):
            assert VALUE.encode() not in head
            assert b"ghp_atk" not in gzip_or(body), body


def _responses(data: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    while b"\r\n\r\n" in data:
        head, _, data = data.partition(b"\r\n\r\n")
        if b"chunked" in head.lower():
            body = b""
            while data:
                size, _, data = data.partition(b"\r\n")
                n = int(size.split(b";")[0] or b"0", 16)
                if n == 0:
                    data = data.partition(b"\r\n")[2]
                    break
                body, data = body + data[:n], data[n + 2 :]
        else:
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                ),
                len(data),
            )
            body, data = data[:length], data[length:]
        out.append((head, body))
    return out


def gzip_or(text: bytes) -> bytes:
    start = text.find(b"\x1f\x8b")
    if start < 0:
        return text
    try:
        return gzip.decompress(text[start:])
    except (OSError, EOFError):
        return text


# --- the value carried to another origin (Host games) -------------------------------------


def _hosts_received(rig: Rig) -> list[list[bytes]]:
    return [
        [
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(b"host:")
        ]
        for head in rig.up.heads
    ]


@pytest.mark.parametrize(
    "host_lines",
    [
        "Host: evil.example\r\nHost: localhost:PORT",  # two Hosts: a CDN may route by the first
        "Host: localhost:PORT\r\nHost: evil.example",
        "Host: evil.example@localhost:PORT",  # userinfo: urlsplit reads past the '@'
        "Host: localhost:PORT/evil.example",
        "Host: localhost:PORT#evil.example",
        "Host: localhost:PORT?evil.example",
        "Host: evil.example\\@localhost:PORT",
    ],
)
def test_only_the_tunnels_host_ever_reaches_upstream(rig: Rig, host_lines: str) -> None:
    """Whatever the Host lines say, a request carrying the value reaches the upstream only
    with exactly one Host, naming the tunnel's host (a front end that reads another form —
    the first of two, the part before '@' or after '/' — would route the value elsewhere)."""
    rig.send(
        f"GET / HTTP/1.1\r\n{host_lines}\r\nAuthorization: Bearer PH\r\nConnection: close\r\n\r\n"
    )
    want = f"localhost:{rig.up.port}".encode()
    for hosts in _hosts_received(rig):
        assert hosts in ([want], [b"localhost"]), hosts
    assert b"evil" not in rig.received()


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example@localhost:PORT/",
        "https://evil.example\\@localhost:PORT/",
        "https://localhost:PORT\\@evil.example/",
        "https://user:pw@localhost:PORT/",
    ],
)
def test_absolute_form_with_userinfo_never_reaches_upstream(rig: Rig, target: str) -> None:
    rig.send(
        f"GET {target} HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert b"evil" not in rig.received() and b"user:pw" not in rig.received()


# --- the value coming back to the command -------------------------------------------------


def _stored_gzip(head: bytes, earlier: list[bytes]) -> bytes:
    """An upstream that keeps request heads and serves the last one back, compressed when
    asked (a request bin, an API's 'last request' debug page)."""
    if b"GET /last" in head and earlier:
        return _reply(gzip.compress(earlier[-1]), b"content-encoding: gzip")
    return _reply(b"ok")


@pytest.mark.parametrize("rig", [_stored_gzip], indirect=True)
def test_a_stored_echo_fetched_compressed_is_not_passed_unread(rig: Rig) -> None:
    """The first request carries the value (sent identity); the second carries none and asks
    gzip: the stored echo comes back compressed, where no scan can see it."""
    got = rig.send(
        "GET /store HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n\r\n"
        "GET /last HTTP/1.1\r\nHost: localhost:PORT\r\nAccept-Encoding: gzip\r\n"
        "Connection: close\r\n\r\n"
    )
    assert VALUE.encode() in rig.received()  # the bound host did get it
    _no_value(got)


def _two_encodings(head: bytes, earlier: list[bytes]) -> bytes:
    return _reply(gzip.compress(head), b"content-encoding: gzip", b"content-encoding: identity")


@pytest.mark.parametrize("rig", [_two_encodings], indirect=True)
def test_a_second_content_encoding_header_does_not_hide_gzip(rig: Rig) -> None:
    got = rig.send(
        "GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert VALUE.encode() in rig.received()
    _no_value(got)


def _auth_of(head: bytes) -> bytes:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"authorization:"):
            return line.split(b":", 1)[1].strip().split(b" ")[-1]
    return b""


def _in_reason(head: bytes, earlier: list[bytes]) -> bytes:
    return _reply(b"no", status=b"401 bad token " + _auth_of(head))


def _in_header_name(head: bytes, earlier: list[bytes]) -> bytes:
    return _reply(
        b"no",
        b"x-" + _auth_of(head).replace(b"/", b"").replace(b"+", b"").replace(b"=", b"") + b": 1",
    )


@pytest.mark.parametrize("rig", [_in_reason], indirect=True)
def test_the_value_echoed_in_the_reason_phrase_is_scrubbed(rig: Rig) -> None:
    got = rig.send(
        "GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert VALUE.encode() in rig.received()
    _no_value(got)


def _encoded(head: bytes, earlier: list[bytes]) -> bytes:
    """The value as servers quote it: URL-encoded in a redirect's Location, JSON with '/'
    escaped (PHP's json_encode), in a query of an HTML page."""
    from urllib.parse import quote

    token = _auth_of(head).decode()
    body = b'{"token": "' + token.replace("/", "\\/").encode() + b'"}'
    return _reply(
        body,
        f"location: https://localhost/login?next=x&token={quote(token, safe='')}".encode(),
        status=b"302 Found",
    )


@pytest.mark.parametrize("rig", [_encoded], indirect=True)
def test_the_value_url_or_json_escaped_is_scrubbed(rig: Rig) -> None:
    got = rig.send(
        "GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert VALUE.encode() in rig.received()
    _no_value(got)
    assert b"ghp_atk%2Fvalue%2B" not in got and b"ghp_atk\\/value+" not in got


def _range(head: bytes, earlier: list[bytes]) -> bytes:
    """An echo behind a generic Range handler (a file-serving middleware, a CDN cache)."""
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"range: bytes="):
            a, b = line.split(b"=", 1)[1].split(b"-")
            part = head[int(a) : int(b) + 1]
            return _reply(
                part,
                b"content-range: bytes %s-%s/%d" % (a, b, len(head)),
                status=b"206 Partial Content",
            )
    return _reply(head)


def _body(response: bytes) -> bytes:
    head, _, rest = response.partition(b"\r\n\r\n")
    if b"chunked" not in head.lower():
        return rest
    out = b""
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, rest = out + rest[:n], rest[n + 2 :]
    return out


@pytest.mark.parametrize("rig", [_range], indirect=True)
def test_a_ranged_echo_does_not_hand_the_value_back_in_pieces(rig: Rig) -> None:
    """Pieces shorter than the value slip past any scan: ask for the echo 10 bytes at a time."""
    start = len(f"GET / HTTP/1.1\r\nHost: localhost:{rig.up.port}\r\nauthorization: Bearer ")
    pieces = b""
    for at in range(start, start + len(VALUE), 10):
        got = rig.send(
            f"GET / HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n"
            f"Range: bytes={at}-{at + 9}\r\nConnection: close\r\n\r\n"
        )
        pieces += _body(got)
    assert VALUE.encode() in rig.received()
    assert VALUE.encode() not in pieces, pieces


def _stored_range(head: bytes, earlier: list[bytes]) -> bytes:
    """Keeps request heads; `/last` serves the one before, ranged when asked."""
    if b"GET /last" in head and earlier:
        return _ranged(head, earlier[-1])
    return _reply(b"ok")


def _ranged(head: bytes, stored: bytes) -> bytes:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"range: bytes="):
            a, b = line.split(b"=", 1)[1].split(b"-")
            span = b"content-range: bytes " + a + b"-" + b + b"/" + str(len(stored)).encode()
            return _reply(stored[int(a) : int(b) + 1], span, status=b"206 Partial Content")
    return _reply(stored)


@pytest.mark.parametrize("rig", [_stored_range], indirect=True)
def test_a_stored_echo_fetched_in_ranges_does_not_hand_the_value_back(rig: Rig) -> None:
    """Each piece comes back to a request that carried no value, each response scanned on its
    own: 10-byte pieces of a stored echo rebuilt the value."""
    start = len(f"GET /store HTTP/1.1\r\nHost: localhost:{rig.up.port}\r\nauthorization: Bearer ")
    pieces = b""
    for at in range(start, start + len(VALUE), 10):
        got = rig.send(
            "GET /store HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Bearer PH\r\n\r\n"
            f"GET /last HTTP/1.1\r\nHost: localhost:PORT\r\nRange: bytes={at}-{at + 9}\r\n"
            "Connection: close\r\n\r\n"
        )
        second = got.find(b"HTTP/1.1 ", 1)
        assert second > 0, got
        pieces += _body(got[second:])
    assert VALUE.encode() in rig.received()
    assert VALUE.encode() not in pieces, pieces


def _stored(head: bytes, earlier: list[bytes]) -> bytes:
    if b"GET /last" in head and earlier:
        return _reply(earlier[-1])
    return _reply(b"ok")


@pytest.mark.parametrize("rig", [_stored], indirect=True)
def test_a_stored_basic_echo_fetched_on_a_new_connection_is_scrubbed(rig: Rig) -> None:
    """git's way: `Authorization: Basic base64(user:placeholder)`, swapped and re-encoded. The
    re-encoded blob was scrubbed from that request's own response only; a stored echo served
    to a later request (here on a new connection) came back with it, one base64 -d away."""
    blob = base64.b64encode(f"x-access-token:{rig.ph}".encode()).decode()
    rig.send(
        f"GET /store HTTP/1.1\r\nHost: localhost:PORT\r\nAuthorization: Basic {blob}\r\n"
        "Connection: close\r\n\r\n"
    )
    got = rig.send("GET /last HTTP/1.1\r\nHost: localhost:PORT\r\nConnection: close\r\n\r\n")
    sent = _auth_of(rig.up.heads[0])
    assert VALUE.encode() in base64.b64decode(sent)  # the bound host did get it
    assert sent not in _body(got), got


@pytest.mark.parametrize(
    ("target", "host"),
    [
        ("/", "LOCALHOST:PORT"),
        ("/", "localhost.:PORT"),
        ("https://localhost:PORT/x", "localhost:PORT"),
        ("HTTPS://LOCALHOST.:PORT?x", "localhost:PORT"),
    ],
)
def test_the_tunnels_host_in_any_spelling_still_gets_the_value(
    rig: Rig, target: str, host: str
) -> None:
    """The strict Host check is not a refusal of the same host spelled otherwise."""
    got = rig.send(
        f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer PH\r\n"
        "Connection: close\r\n\r\n"
    )
    assert got.startswith(b"HTTP/1.1 200"), got
    assert VALUE.encode() in rig.received()
    _no_value(got)
