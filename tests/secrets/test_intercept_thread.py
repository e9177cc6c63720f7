"""The intercepted connection on a thread of its own (secrets/handoff.py), against real sockets
on 127.0.0.1: the proxy closed while a request is in flight ends the thread and closes its
descriptors; a kept-alive connection's second request to another host is still cut; the
record's bytes are exact. Both sides of the proxy go through a counting TCP relay, so the
record is checked against the bytes that really crossed each socket."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.record import Egress
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets import intercept
from sprawl_orch.secrets.intercept import Interception
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from tests.secrets.raw import Raw, raw_upstream
from tests.secrets.test_attacks import VALUE, _no_value, _reply, _responses

SESSION = "sprawl-secrets-session"


class Counted:
    """A TCP relay on 127.0.0.1 to `port` that counts what crossed it each way."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.to_target = 0  # bytes the side that connected sent
        self.from_target = 0
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed: the test is over
            while True:
                near, _ = self.listener.accept()
                far = socket.create_connection(("127.0.0.1", self.target))
                for sock in (near, far):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for args in ((near, far, True), (far, near, False)):
                    thread = threading.Thread(target=self._copy, args=args, daemon=True)
                    self.threads.append(thread)
                    thread.start()

    def _copy(self, source: socket.socket, sink: socket.socket, up: bool) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                with self._lock:
                    if up:
                        self.to_target += len(data)
                    else:
                        self.from_target += len(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:  # a reset on either side ends both ways
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def settled(self) -> None:
        """Every copy has ended (its counts final)."""
        for thread in list(self.threads):
            thread.join(timeout=30)
            assert not thread.is_alive()

    def close(self) -> None:
        self.listener.close()


class ThreadRig:
    def __init__(self, up: Raw, tmp_path: Path) -> None:
        self.upstream = Counted(up.port)  # the proxy -> it -> the raw upstream
        self.up = up
        where = f"localhost:{self.upstream.port}"
        self.run = SecretRun(
            (Spec(name="GH_PAT", hosts=Rules.parse((where,)), host_list=(where,), value=VALUE),),
            upstream_cafile=str(up.ca_file(tmp_path)),
        )
        self.proxy = EgressProxy(Rules.parse((where, "127.0.0.1")), secrets=Interception(self.run))
        self.proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        self.proxy.serve(listener)
        self.client = Counted(listener.getsockname()[1])  # the command -> it -> the proxy
        self.bundle = tmp_path / "bundle.pem"
        self.bundle.write_bytes(self.run.ca.pem)
        self.ph = self.run.env()["GH_PAT"]
        self.reply = 0  # the CONNECT's 200, which the record does not count

    def connect(self) -> ssl.SSLSocket:
        sock = socket.create_connection(("127.0.0.1", self.client.port), timeout=60)
        host = f"localhost:{self.upstream.port}"
        sock.sendall(f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(4096)
        assert b" 200" in reply.split(b"\r\n")[0], reply
        self.reply += len(reply)
        return ssl.create_default_context(cafile=str(self.bundle)).wrap_socket(
            sock, server_hostname="localhost"
        )

    def get(self, tls: ssl.SSLSocket, path: str, host: str = "localhost") -> None:
        port = self.upstream.port
        tls.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {self.ph}\r\n\r\n".encode()
        )

    def exact(self, record: Egress) -> None:
        """The record's bytes are what crossed the proxy's two sockets."""
        self.client.settled()
        self.upstream.settled()
        assert record.bytes_up == self.upstream.to_target
        assert record.bytes_down == self.client.from_target - self.reply

    def close(self) -> None:
        self.proxy.close()
        self.client.close()
        self.upstream.close()


def _answered(tls: ssl.SSLSocket, count: int) -> bytes:
    """Read until `count` answers came whole (by their Content-Length, or chunked)."""
    out = b""
    while out.count(b"HTTP/1.1 200") < count or not _ends_whole(out):
        chunk = tls.recv(65536)
        assert chunk, out
        out += chunk
    return out


def _ends_whole(data: bytes) -> bool:
    head, found, rest = data[data.rindex(b"HTTP/1.1 ") :].partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(rest) >= int(line.partition(b":")[2])
    return rest.endswith(b"\r\n0\r\n\r\n")


def _sessions() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SESSION]


def _sessions_ended() -> bool:
    """Every session thread returns (it hands its end to the loop just before it does)."""
    for thread in _sessions():
        thread.join(timeout=30)
    return _sessions() == []


def _records(rig: ThreadRig, count: int) -> tuple[Egress, ...]:
    deadline = time.monotonic() + 30
    while len(rig.proxy.records()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return rig.proxy.records()


@pytest.fixture
def hold() -> Iterator[threading.Event]:
    """Set to let the upstream answer a request whose path is /hold."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def rig(tmp_path: Path, hold: threading.Event) -> Iterator[ThreadRig]:
    def handler(head: bytes, earlier: list[bytes]) -> bytes:
        if b" /hold " in head.split(b"\r\n")[0]:
            hold.wait(60)
        if b" /big " in head.split(b"\r\n")[0]:
            return _reply(b"x" * 70_000 + b"seen " + head)
        return _reply(b"seen " + head)

    with raw_upstream(handler) as up:
        r = ThreadRig(up, tmp_path)
        try:
            yield r
        finally:
            r.close()


def test_the_proxy_closed_mid_request_ends_the_thread_and_closes_its_descriptors(
    rig: ThreadRig, hold: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upstream holds its answer: the session's thread is blocked reading it when the
    proxy closes. The close shuts both sockets down, waits for the thread, then the
    descriptors close (none left open, none a thread could still read after reuse)."""
    held: list[tuple[int, int]] = []  # (descriptor, its inode) as the thread got them
    carry = intercept.Session.carry

    def spy(self: intercept.Session, client: int, early: bytes, up: int, up_early: bytes) -> None:
        held.extend((fd, os.fstat(fd).st_ino) for fd in (client, up))
        carry(self, client, early, up, up_early)

    monkeypatch.setattr(intercept.Session, "carry", spy)
    tls = rig.connect()
    rig.get(tls, "/first")
    _answered(tls, 1)
    rig.get(tls, "/hold")
    deadline = time.monotonic() + 30
    while len(rig.up.heads) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(rig.up.heads) == 2  # the held request reached the upstream
    assert len(_sessions()) == 1
    rig.proxy.close()
    assert _sessions_ended()
    assert len(held) == 2
    for fd, inode in held:
        try:
            reused = os.fstat(fd).st_ino == inode
        except OSError:
            reused = False  # closed
        assert not reused, f"descriptor {fd} still open on the session's socket"
    tls.close()
    hold.set()  # the upstream's answer now meets a closed socket, and its side ends
    (record,) = rig.proxy.records()
    assert record.reason == "the proxy closed (the run ended)"
    rig.exact(record)
    assert rig.run.report()["injected"] == [
        {"secret": "GH_PAT", "host": f"localhost:{rig.upstream.port}", "requests": 2}
    ]


def test_a_second_request_to_another_host_on_the_thread_is_cut(rig: ThreadRig) -> None:
    """Kept alive on its thread, the connection's second request names another allowed host
    (127.0.0.1, the same upstream): cut before it is sent, the first still answered, the
    thread gone with the connection, the record exact."""
    tls = rig.connect()
    rig.get(tls, "/one")
    got = _answered(tls, 1)
    rig.get(tls, "/two", host="127.0.0.1")
    with contextlib.suppress(OSError, ssl.SSLError):
        while chunk := tls.recv(65536):
            got += chunk
    tls.close()
    (record,) = _records(rig, 1)
    assert not record.allowed
    assert "inside the tunnel" in record.reason
    assert [h.split(b" ")[1] for h in rig.up.heads] == [b"/one"]
    assert got.count(b"HTTP/1.1 200") == 1
    _no_value(got)
    assert _sessions_ended()
    rig.exact(record)


def test_kept_alive_requests_on_the_thread_are_swapped_scrubbed_and_counted(
    rig: ThreadRig,
) -> None:
    """Ten requests on one connection: each reached the upstream with the value, each
    answer (which echoes it) came back scrubbed, ten injections counted, and the record
    written when the command closed says exactly the bytes that crossed."""
    tls = rig.connect()
    got = b""
    for n in range(10):
        rig.get(tls, f"/r{n}")
        got += _answered(tls, 1)
    tls.close()
    (record,) = _records(rig, 1)
    assert record.allowed and record.reason == "tunnel closed"
    assert all(f"Bearer {VALUE}".encode() in h for h in rig.up.heads)
    assert len(rig.up.heads) == 10
    _no_value(got)
    bodies = [body for _, body in _responses(got)]
    assert len(bodies) == 10 and all(rig.ph.encode() in body for body in bodies)
    assert rig.run.report()["injected"][0]["requests"] == 10
    assert rig.run.report()["echoes_scrubbed"] == {f"localhost:{rig.upstream.port}": 10}
    assert _sessions_ended()
    rig.exact(record)


def test_a_small_answer_goes_whole_with_its_scrubbed_length_a_big_one_chunked(
    rig: ThreadRig,
) -> None:
    """The echo holds the value (longer than its placeholder): a small answer comes with the
    Content-Length of its scrubbed body (read whole first), one past 64 KiB streamed chunked;
    both scrubbed, the connection kept for the next."""
    tls = rig.connect()
    rig.get(tls, "/small")
    small = _answered(tls, 1)
    rig.get(tls, "/big")
    big = _answered(tls, 1)
    tls.close()
    ((head, body),) = _responses(small)
    assert f"content-length: {len(body)}".encode() in head.lower()
    assert small.endswith(body) and rig.ph.encode() in body
    ((head, body),) = _responses(big)
    assert b"transfer-encoding: chunked" in head.lower() and len(body) > 70_000
    assert rig.ph.encode() in body
    _no_value(small, big)
    (record,) = _records(rig, 1)
    rig.exact(record)
