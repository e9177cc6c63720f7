"""`python -m tests.egress.bench_client CA PORT PROXY_PORT REPS SIZE`: the benchmark's client,
a process of its own like a sandboxed client: direct vs through-the-proxy GETs, interleaved;
prints the four sample lists as JSON."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time


def get(ctx: ssl.SSLContext, port: int, path: str, proxy: int | None) -> int:
    if proxy is None:
        conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=60)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", proxy, context=ctx, timeout=60)
        conn.set_tunnel("localhost", port)
    conn.request("GET", path)
    size = len(conn.getresponse().read())
    conn.close()
    return size


if __name__ == "__main__":
    ca, port, proxy, reps, size = sys.argv[1], *map(int, sys.argv[2:])
    ctx = ssl.create_default_context(cafile=ca)
    out: dict[str, list[float]] = {"big": [], "big_proxy": [], "small": [], "small_proxy": []}
    for _ in range(reps):
        for key, path, via in (
            ("big", f"/bytes/{size}", None),
            ("big_proxy", f"/bytes/{size}", proxy),
            ("small", "/", None),
            ("small_proxy", "/", proxy),
        ):
            start = time.perf_counter()
            got = get(ctx, port, path, via)
            out[key].append(time.perf_counter() - start)
            assert got > 0
    print(json.dumps(out))
