"""Where a small request's time goes on the intercepted path, beside the tunnel and the raw floor
(issue 25; the ratios themselves are benchmarks/secrets_proxy.py's):

    . .ci/env && python benchmarks/secrets_wakeups.py [--requests 500] [--rounds 2] [--no-trace]

Built to test one hypothesis: that the interception is slower than the floor (raw_mitm.py) for
its hand-offs between threads and wake-ups of sleeping ones, not for its CPU. Per arm, one
connection, N requests from a client process (tests/secrets/bench_spans.py, its request spans
on CLOCK_MONOTONIC), the proxy in this process:
- context switches per request of every thread of this process that switched
  (/proc/self/task/*/status: voluntary = it blocked, involuntary = it was preempted), and the
  process's CPU per request (rusage);
- with tracing (the socket calls of the session thread wrapped: os.readv and os.write, which
  tls.py calls, and SSLSocket.recv/send, which the floor calls): the time from a socket read
  returning to the write it causes, per direction (for the floor decryption and encryption
  happen inside those calls, for the interception outside them); the wait on the upstream;
  the time from the client's start to the proxy's read returning; and how often the proxy's
  thread entered its read for a request only after the client had already started sending it
  (it was still busy, or preempted, when the request came).
Tracing adds ~1 us a call; compare arms within one run. strace on the proxy gives the system
calls (docs/secrets.md, Numbers). With --pieces, the intercepted arm's pieces timed in place
(median per call) and the Reader's feeds replayed: one by one in a warm loop, and with 8 MiB
written between feeds (what a peer's run between two blocks leaves of the caches).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets import head, intercept, wire
from sprawl_orch.secrets.intercept import Interception
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from tests.secrets.raw_mitm import RawMitm

ROOT = str(Path(__file__).resolve().parent.parent)
# (start ns, end ns, "r", "w" or "s" (the floor's select), descriptor, bytes; -1 for a read that
# wanted more)
Call = tuple[int, int, str, int, int]
LOG: list[Call] = []


def trace() -> None:
    """Wrap the calls both paths make on their sockets (in this process only)."""
    now = time.perf_counter_ns
    readv, write = os.readv, os.write
    recv, send = ssl.SSLSocket.recv, ssl.SSLSocket.send
    wait = select.select

    def _readv(fd: int, buffers: Any) -> int:
        start = now()
        got = readv(fd, buffers)
        LOG.append((start, now(), "r", fd, got))
        return got

    def _write(fd: int, data: Any) -> int:
        start = now()
        sent = write(fd, data)
        LOG.append((start, now(), "w", fd, sent))
        return sent

    def _recv(sock: ssl.SSLSocket, size: int = 1024, flags: int = 0) -> bytes:
        start = now()
        try:
            got = recv(sock, size, flags)
        except ssl.SSLWantReadError:
            LOG.append((start, now(), "r", sock.fileno(), -1))
            raise
        LOG.append((start, now(), "r", sock.fileno(), len(got)))
        return got

    def _send(sock: ssl.SSLSocket, data: Any, flags: int = 0) -> int:
        start = now()
        sent = send(sock, data, flags)
        LOG.append((start, now(), "w", sock.fileno(), sent))
        return sent

    def _select(*args: Any) -> Any:
        start = now()
        ready = wait(*args)
        LOG.append((start, now(), "s", -1, 1))
        return ready

    os.readv, os.write = _readv, _write
    select.select = _select
    ssl.SSLSocket.recv, ssl.SSLSocket.send = _recv, _send  # type: ignore[method-assign]


PIECES: dict[str, list[int]] = {}
FED: list[tuple[wire.Reader, bytes]] = []


def pieces() -> None:
    """Time the path's pieces per call (intercepted arm), and keep what each Reader was fed."""
    now = time.perf_counter_ns

    def timed(owner: Any, name: str) -> None:
        inner = getattr(owner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            start = now()
            try:
                return inner(*args, **kwargs)
            finally:
                PIECES.setdefault(name, []).append(now() - start)
                if name == "feed" and len(FED) < 3000:
                    FED.append((args[0], bytes(args[1])))

        setattr(owner, name, call)

    timed(wire.Reader, "feed")
    timed(head.Requests, "head")
    timed(intercept.one_pass, "answer")
    timed(intercept, "scrub_found")
    timed(intercept.Session, "_same_host")


def replay() -> str:
    """The first messages fed in place, fed again to fresh Readers: warm, then cold."""
    # A request past the first few, and the next two reads of the answer (head, body; the
    # echo upstream sends them apart).
    first = next(i for i, (r, _) in enumerate(FED) if i >= 5 and not r.response)
    fed = [FED[first], *[f for f in FED[first:] if f[0].response][:2]]
    junk = bytearray(8 << 20)
    warm: list[list[int]] = [[] for _ in fed]
    cold: list[list[int]] = [[] for _ in fed]
    for times, evict in ((warm, False), (cold, True)):
        for _ in range(300):
            readers = {}
            for i, (was, data) in enumerate(fed):
                reader = readers.setdefault(id(was), wire.Reader(was.response, was.watch))
                if evict:
                    junk[:] = junk[::-1]
                start = time.perf_counter_ns()
                reader.feed(data)
                times[i].append(time.perf_counter_ns() - start)
    return (
        "\n    the same feeds replayed ("
        + ", ".join(f"{'answer' if r.response else 'request'} {len(d)} B" for r, d in fed)
        + "), warm: "
        + ", ".join(f"{us(t)} us" for t in warm)
        + "; 8 MiB written before each: "
        + ", ".join(f"{us(t)} us" for t in cold)
    )


def switches() -> dict[str, tuple[int, int]]:
    """Each thread's (voluntary, involuntary) context switches."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            status = Path(f"/proc/self/task/{tid}/status").read_text()
        except OSError:  # the thread ended
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        out[tid] = (
            int(fields["voluntary_ctxt_switches"]),
            int(fields["nonvoluntary_ctxt_switches"]),
        )
    return out


def us(values: list[int]) -> str:
    return f"{statistics.median(values) / 1000:.1f}" if values else "-"


def path(calls: list[Call], spans: list[tuple[int, int]]) -> str:
    """The trace read request by request: the client's descriptor is the first one read."""
    calls = [c for c in calls if c[4] != 0]
    reads = [c for c in calls if c[2] == "r"]
    if not reads:
        return ""
    client = reads[0][3]
    inward, outward, upstream, arrived, late = [], [], [], [], 0
    read_client = read_up = wrote_up = None
    for start, end, op, fd, size in calls:
        if op == "r" and size > 0 and fd == client:
            read_client = end
        elif op == "r" and size > 0:
            if read_up is None and wrote_up is not None:
                upstream.append(end - wrote_up)
            read_up = end  # the answer's last read before it goes out
        elif op == "w" and fd != client and read_client is not None:
            inward.append(start - read_client)
            read_client, read_up, wrote_up = None, None, end
        elif op == "w" and fd == client and read_up is not None:
            outward.append(start - read_up)
            read_up = None
    for first, _ in spans:
        got = [c for c in calls if c[2] == "r" and c[3] == client and c[1] >= first]
        if got and got[0][4] > 0:
            arrived.append(got[0][1] - first)
        # Where the thread waited for this request: its read, or the floor's select.
        waits = [
            c for c in calls if c[1] >= first and (c[2] == "s" or (c[2] == "r" and c[3] == client))
        ]
        late += bool(waits) and waits[0][0] > first
    return (
        f"\n    read->write upstream {us(inward)} us, upstream wait {us(upstream)} us, "
        f"answer read->write back {us(outward)} us, client start->proxy read {us(arrived)} us, "
        f"read entered after the client started {late / max(len(spans), 1):.0%}"
    )


def arm(tmp: Path, port: int, which: str, n: int) -> str:
    host = "elsewhere.invalid" if which == "tunnel" else "localhost"
    spec = Spec("TOKEN", Rules.parse((host,)), (host,), "real-value-for-the-benchmark")
    run = SecretRun((spec,), upstream_cafile=str(tmp / "ca.pem"))
    rules = Rules.parse((f"localhost:{port}", "127.0.0.1", "::1"))
    proxy = EgressProxy(rules, secrets=Interception(run))
    proxy.start()
    listener = socket.create_server(("127.0.0.1", 0))
    proxy.serve(listener)
    bundle = tmp / "bundle.pem"
    bundle.write_bytes((tmp / "ca.pem").read_bytes() + run.ca.pem)
    floor = None
    if which == "raw":
        floor = RawMitm(run.ca.server_context("localhost"), run.upstream_context(), port)
    via = floor.port if floor is not None else listener.getsockname()[1]
    args = [str(bundle), str(port), str(via), str(n), run.env()["TOKEN"]]
    client = subprocess.Popen(
        [sys.executable, "-m", "tests.secrets.bench_spans", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        client.stdout.readline()  # warmed
        LOG.clear()
        PIECES.clear()
        FED.clear()
        before, cpu = switches(), resource.getrusage(resource.RUSAGE_SELF)
        client.stdin.write("\n")
        client.stdin.flush()
        spans = [tuple(s) for s in json.loads(client.stdout.readline())]
        after, cpu_after = switches(), resource.getrusage(resource.RUSAGE_SELF)
        calls = list(LOG)
        client.communicate("\n", timeout=60)
    finally:
        proxy.close()
        if floor is not None:
            floor.close()
    seconds = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
    threads = []
    for tid, (vol, inv) in after.items():
        was = before.get(tid)
        if was is not None and (vol - was[0] or inv - was[1]):
            threads.append(f"{(vol - was[0]) / n:.2f}v/{(inv - was[1]) / n:.2f}i")
    median = statistics.median(e - s for s, e in spans) / 1e6
    placed = ""
    if PIECES and which == "intercepted":
        placed = "\n    in place, median per call: " + ", ".join(
            f"{name} {us(times)} us ({len(times) / n:.2f}/request)"
            for name, times in PIECES.items()
        )
        placed += replay()
    PIECES.clear()
    return (
        f"{which:11s} {median:.3f} ms, proxy CPU {seconds / n * 1000:.3f} ms/request, "
        f"switches per request by thread (v voluntary, i preempted): {' '.join(threads)}"
        + path(calls, spans)  # type: ignore[arg-type]
        + placed
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-trace", action="store_true")
    parser.add_argument("--pieces", action="store_true")
    args = parser.parse_args()
    if args.pieces:
        pieces()
    tracing: Callable[[], None] = (lambda: None) if args.no_trace else trace
    tracing()
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    tmp = Path(tempfile.mkdtemp(prefix="sprawl-secrets-wake-"))
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.secrets.serve_echo", str(tmp)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        for _ in range(args.rounds):
            for which in ("tunnel", "intercepted", "raw"):
                print(arm(tmp, port, which, args.requests), flush=True)
    finally:
        server.communicate("", timeout=30)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
