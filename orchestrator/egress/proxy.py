"""The host-side proxy: HTTP CONNECT tunnels and plain HTTP forwarding, deny by default.

One EgressProxy per run (or per server), its own asyncio loop on a thread of the caller's
process. It accepts on listening sockets it is handed — normally one made inside the
sandbox's network namespace (netns.py) — so the sandbox itself keeps no route out.

Every connection is decided the same way (sandbox-runtime's and Codex's bypass reports are
what each step answers): the name and port against the rules (deny wins); an IP literal only
if listed; the name resolved *once* here and the connection made to the address checked
(no second lookup a rebinding DNS could answer differently); every resolved address checked
against addresses.REFUSED (loopback, private, metadata, ...); for a tunnel, the TLS
ClientHello's SNI must equal the CONNECT host (domain fronting); for plain HTTP, the URL's
host must equal the Host header. HTTP heads are parsed by h11, ClientHellos by tlslite-ng.

Issue 25 (TLS interception with a per-run CA) plugs in at `EgressProxy._relay`: the checked
client and upstream streams plus the first ClientHello record are all it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import struct
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from sprawl_orch.egress import flows
from sprawl_orch.egress.record import Egress, Tally
from sprawl_orch.egress.rules import IpAddress, Rules
from sprawl_orch.egress.workers import Workers

if TYPE_CHECKING:
    from sprawl_orch.egress.interceptor import Interceptor

# Connections open at once through one proxy. Without a cap a command could open connections
# until the host process ran out of descriptors (its other runs, its ledger and its engines
# with it). Past it: 503, recorded.
MAX_CONNECTIONS = 256
# What one spliced tunnel holds of the orchestrator: the client's and the upstream's sockets,
# a pipe (two ends) per direction, and two threads (relay.py). 256 of them need 1536
# descriptors, past the soft limit of 1024 most Linux sessions start with: 255 tunnels from one
# command (tests/unit/test_egress_exhaustion.py) ran a proxy's process out of descriptors.
FDS_PER_TUNNEL = 6
# Left free for everything else the orchestrator opens (its ledger, engines' pipes, listeners).
FDS_SPARE = 256
_BUDGET = threading.Lock()
_claimed = 0  # descriptors claimed by the proxies alive in this process


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc (not Linux): count nothing, the limit alone decides
        return 0


def claim_descriptors(connections: int) -> int:
    """Claim descriptors for `connections` tunnels from the process's RLIMIT_NOFILE, raising
    its soft limit toward the hard one when it is short; how many connections fit (fewer
    when the hard limit is too low: the proxy's cap is lowered, never the process starved).
    Claims add up over the proxies alive in one process (a server's runs)."""
    global _claimed
    with _BUDGET:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        taken = _open_descriptors() + FDS_SPARE + _claimed
        need = taken + connections * FDS_PER_TUNNEL
        if need > soft:
            target = need if hard == resource.RLIM_INFINITY else min(need, hard)
            # Refused (a hard limit lowered meanwhile): the cap below fits the soft one.
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
        granted = max(0, min(connections, (soft - taken) // FDS_PER_TUNNEL))
        _claimed += granted * FDS_PER_TUNNEL
        return granted


def release_descriptors(connections: int) -> None:
    global _claimed
    with _BUDGET:
        _claimed = max(0, _claimed - connections * FDS_PER_TUNNEL)


Resolver = Callable[[str, int], Awaitable[list[IpAddress]]]
Observer = Callable[[Egress], None]


class EgressProxy:
    """Start with `start()`, hand it listeners with `serve(sock)`, read `records()`, end with
    `close()` (which also ends every open tunnel: the command's network ends with it)."""

    def __init__(
        self,
        rules: Rules,
        resolve: Resolver | None = None,
        observe: Observer | None = None,
        connect_timeout: float = 15.0,
        max_connections: int = MAX_CONNECTIONS,
        splice: bool = True,
        secrets: Interceptor | None = None,
    ) -> None:
        self.secrets = secrets  # issue 25: hosts bound to a secret are intercepted
        self.max_connections = max_connections
        # False: tunnels copied through asyncio streams (the benchmark's side-by-side row).
        self.splice = splice
        self.workers = Workers()  # the relay's threads, kept for the next tunnel
        self.rules = rules
        self._resolve = resolve
        self._observe = observe
        self.connect_timeout = connect_timeout
        self._tally = Tally()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        # What a dead loop can no longer close by itself (_abandon): the listeners, and the
        # client connections not yet ended normally.
        self._listeners: list[socket.socket] = []
        self._writers: set[asyncio.StreamWriter] = set()
        # Every transport a connection made (the client's, the upstream's) until collected: a
        # closed transport with unsent bytes (a command that stopped reading) waits to flush
        # before it closes its socket, and a stopped loop never flushes; _end aborts them.
        self._transports: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()
        self._closing = False
        self.failure: str | None = None
        self.cap_note = ""  # why max_connections is below what was asked, if it is
        self._released = False

    def start(self) -> None:
        wanted = self.max_connections
        self.max_connections = claim_descriptors(wanted)
        if self.max_connections < wanted:
            self.cap_note = (
                f" (lowered from {wanted}: the orchestrator's descriptor limit, RLIMIT_NOFILE,"
                f" fits no more at {FDS_PER_TUNNEL} per tunnel)"
            )
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            ready.set()
            try:
                loop.run_forever()
                if not self._closing:
                    self.failure = "the proxy's loop stopped before the command ended"
            except BaseException as err:  # the proxy's own failure ends the network
                self.failure = f"the proxy's loop died: {err!r}"
            finally:
                if self.failure is not None:
                    self._abandon(loop)
                loop.close()

        self._thread = threading.Thread(target=run, name="sprawl-egress", daemon=True)
        self._thread.start()
        ready.wait()

    def _abandon(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop died mid-run: end the command's network rather than leave it half-alive.
        A listener left open would still complete the kernel's handshakes into its backlog,
        and the command's next connection would hang instead of failing; so every listener
        and every client connection is closed — by the loop once more if it still runs
        (what it had scheduled, e.g. a transport's close, runs then), else directly."""
        with contextlib.suppress(BaseException):  # a loop too broken to run: closed below
            loop.run_until_complete(asyncio.wait_for(self._end(), 10))
        for listener in self._listeners:
            listener.close()
        for writer in list(self._writers):
            sock = writer.get_extra_info("socket")
            # Closed already (the loop ran its close): nothing left to end.
            with contextlib.suppress(OSError, AttributeError):
                sock.shutdown(socket.SHUT_RDWR)

    async def _end(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Whatever is still open or flushing ends now: the run is over, nobody reads it. A
        # reset, not a FIN: a FIN after unsent bytes left the kernel holding them (an orphan
        # in FIN-WAIT-1) and the command's end of the connection open until they drained.
        for transport in list(self._transports):
            _reset(transport)
        await asyncio.sleep(0)  # abort closes its socket on the loop's next round

    def _call(self, coro: Awaitable[object]) -> object:
        assert self._loop is not None, "start() first"

        async def wrap() -> object:
            return await coro

        future: Future[object] = asyncio.run_coroutine_threadsafe(wrap(), self._loop)
        return future.result()

    def serve(self, listener: socket.socket) -> None:
        """Accept on `listener` (bound and listening; the proxy owns it from now on)."""
        listener.setblocking(False)
        self._listeners.append(listener)

        async def begin() -> None:
            server = await asyncio.start_server(
                self._accepted, sock=listener, limit=flows.STREAM_LIMIT
            )
            self._servers.append(server)

        self._call(begin())

    def records(self) -> tuple[Egress, ...]:
        """The records kept (record.MAX_RECORDS, MAX_RECORD_BYTES); `tally()` counts all."""
        with self._lock:
            return tuple(self._tally.kept)

    def tally(self) -> Tally:
        with self._lock:
            return Tally(
                kept=list(self._tally.kept),
                kept_bytes=self._tally.kept_bytes,
                dropped=self._tally.dropped,
                allowed=self._tally.allowed,
                refused=self._tally.refused,
                up=self._tally.up,
                down=self._tally.down,
                hosts=set(self._tally.hosts),
            )

    def close(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._closing = True
        if self._loop.is_running():
            self._call(self._end())
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        # Every tunnel has ended (its sockets cut): the relay's threads end with the proxy.
        self.workers.close(wait=self.failure is None)
        self._loop = None
        if not self._released:
            self._released = True
            release_descriptors(self.max_connections)

    def _note(self, record: Egress) -> None:
        with self._lock:
            self._tally.add(record)
        if self._observe is not None:
            self._observe(record)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        _no_delay(writer)
        started = time.monotonic()
        flow = flows.Flow(self, reader, writer, started)
        try:
            if len(self._tasks) > self.max_connections:
                record = await flow.refuse(
                    f"more than {self.max_connections} connections open through the proxy"
                    + self.cap_note,
                    503,
                )
            else:
                record = await flow.run()
        except asyncio.CancelledError:
            # Cancelled by close() (the run ended) or by _abandon (the loop died first): the
            # command's connection is cut now, not closed behind what it had not read yet.
            _reset(writer.transport)
            ended = "the proxy closed (the run ended)"
            if self.failure is not None:
                ended = f"the proxy failed, which cut this connection: {self.failure}"
            record = flow.ended(ended)
        except Exception as err:
            # Every connection is recorded, whatever broke in its flow (an unexpected parser
            # or codec error went to asyncio's log and left the attempt unnamed).
            record = flow.ended(f"the proxy failed on this connection: {err!r}", allowed=False)
        finally:
            writer.close()
            self._tasks.discard(task)
            self._transports.add(writer.transport)
            if flow.upstream is not None:
                self._transports.add(flow.upstream[1].transport)
        self._note(record)
        # Only on a normal end: a loop dying in this flow leaves it for _abandon to cut.
        self._writers.discard(writer)

    async def resolve(self, host: str, port: int) -> list[IpAddress]:
        if self._resolve is not None:
            return await self._resolve(host, port)
        return await flows.system_resolve(host, port)

    async def relay(self, flow: flows.Flow, first: bytes) -> None:
        """Carry bytes both ways once a tunnel is checked (issue 25 decides here, per host,
        whether to intercept instead)."""
        if self.secrets is not None and self.secrets.wants(flow.host, flow.port):
            await self.secrets.relay(flow, first)
            return
        await flow.pipe(first)

    def plain(self, host: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        """A plain-HTTP request about to go out (issue 25 counts a placeholder in it)."""
        if self.secrets is not None:
            self.secrets.plain_request(host, target, headers)


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """Nagle off on the command's side, whatever made the listener. asyncio sets TCP_NODELAY
    only on sockets whose `proto` reads IPPROTO_TCP, and a listener made with
    socket.socket(AF_INET, SOCK_STREAM) or create_server says 0 (its accepted sockets too):
    the interception's response head and body then went as two segments and the second
    waited out the client's delayed ACK, 40 ms a request (benchmarks/secrets_proxy.py)."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):  # a client already gone: the flow notices next
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _reset(transport: asyncio.BaseTransport) -> None:
    """Close with a reset (SO_LINGER 0), whatever the transport still had to send."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed: abort below is a no-op too
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if isinstance(transport, asyncio.WriteTransport):
        transport.abort()
