"""`python -m tests.egress.bench_client CA PORT PROXY_PORT COPY_PORT REPS SIZE`: the benchmark's
client, a process of its own like a sandboxed client: direct vs through the proxy (spliced) vs
through a proxy that copies through its streams, GETs interleaved; prints the sample lists as
JSON."""

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


if __name__ == "__main__" and sys.argv[1] == "through":
    through(sys.argv[2], *map(int, sys.argv[3:]))
elif __name__ == "__main__":
    ca, port, proxy, copying, reps, size = sys.argv[1], *map(int, sys.argv[2:])
    ctx = ssl.create_default_context(cafile=ca)
    kinds = ("big", "big_proxy", "big_copy", "small", "small_proxy")
    out: dict[str, list[float]] = {k: [] for k in (*kinds, "body", "body_proxy", "body_copy")}
    for _ in range(reps):
        for key, path, via in (
            ("big", f"/bytes/{size}", None),
            ("big_proxy", f"/bytes/{size}", proxy),
            ("big_copy", f"/bytes/{size}", copying),
            ("small", "/", None),
            ("small_proxy", "/", proxy),
        ):
            start = time.perf_counter()
            got, body = get(ctx, port, path, via)
            out[key].append(time.perf_counter() - start)
            if key.startswith("big"):
                out[key.replace("big", "body")].append(body)
            assert got > 0
    print(json.dumps(out))
