"""`python -m tests.egress.bench_client CA PORT REPS SIZE NAME=PORT...`: the benchmark's client, a
process of its own like a sandboxed client: the same GET direct and through each named proxy
(`proxy` is the real one; the others are side-by-side rows: the stream copy, the raw floor),
interleaved, their order rotated each rep so no row always runs right after direct; prints the
sample lists as JSON."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time


def get(ctx: ssl.SSLContext, port: int, path: str, proxy: int | None) -> tuple[int, float]:
    """The body's size and the seconds its bytes took (from the response head to the last
    byte: the connection's setup, measured on its own, left out)."""
    if proxy is None:
        conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=60)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", proxy, context=ctx, timeout=60)
        conn.set_tunnel("localhost", port)
    conn.request("GET", path)
    response = conn.getresponse()
    start = time.perf_counter()
    size = len(response.read())
    took = time.perf_counter() - start
    conn.close()
    return size, took


def through(ca: str, port: int, proxy: int, reps: int, size: int) -> None:
    """`through CA PORT PROXY REPS SIZE`: REPS GETs through one proxy only (the benchmark
    reads that proxy's process CPU around it)."""
    ctx = ssl.create_default_context(cafile=ca)
    for _ in range(reps):
        assert get(ctx, port, f"/bytes/{size}", proxy)[0] == size


def compare(ca: str, port: int, reps: int, size: int, vias: dict[str, int]) -> None:
    """Keys: `big` (direct) and `big_NAME` (whole GET), `body`/`body_NAME` (body only),
    `small`/`small_NAME` (a tiny GET: setup)."""
    ctx = ssl.create_default_context(cafile=ca)
    rows: list[tuple[str, int | None]] = [("", None), *((f"_{n}", p) for n, p in vias.items())]
    out: dict[str, list[float]] = {}
    for rep in range(reps):
        turn = rep % len(rows)
        for suffix, via in rows[turn:] + rows[:turn]:
            start = time.perf_counter()
            got, body = get(ctx, port, f"/bytes/{size}", via)
            out.setdefault(f"big{suffix}", []).append(time.perf_counter() - start)
            out.setdefault(f"body{suffix}", []).append(body)
            assert got == size
        for suffix, via in rows[turn:] + rows[:turn]:
            start = time.perf_counter()
            assert get(ctx, port, "/", via)[0] > 0
            out.setdefault(f"small{suffix}", []).append(time.perf_counter() - start)
    print(json.dumps(out))


if __name__ == "__main__" and sys.argv[1] == "through":
    through(sys.argv[2], *map(int, sys.argv[3:]))
elif __name__ == "__main__":
    ca, port, reps, size = sys.argv[1], *map(int, sys.argv[2:5])
    named = dict(arg.split("=", 1) for arg in sys.argv[5:])
    compare(ca, port, reps, size, {name: int(p) for name, p in named.items()})
