"""`python -m tests.secrets.bench_spans CA_BUNDLE PORT PROXY_PORT N HEADER`: N small GETs on one
connection through the proxy's CONNECT tunnel (5 first, unsampled), started when a line comes on
stdin; prints each request's start and end on CLOCK_MONOTONIC (`time.perf_counter_ns`, the same
clock in every process on Linux) as JSON, so the proxy's own timestamps fall inside them
(benchmarks/secrets_wakeups.py)."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time


def main() -> None:
    bundle, port, proxy_port, n, header = sys.argv[1:6]
    ctx = ssl.create_default_context(cafile=bundle)
    conn = http.client.HTTPSConnection("127.0.0.1", int(proxy_port), context=ctx, timeout=60)
    conn.set_tunnel("localhost", int(port))

    def get() -> None:
        conn.request("GET", "/small", headers={"authorization": f"Bearer {header}"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status

    for _ in range(5):
        get()
    print("ready", flush=True)
    sys.stdin.readline()
    spans = []
    for _ in range(int(n)):
        start = time.perf_counter_ns()
        get()
        spans.append((start, time.perf_counter_ns()))
    print(json.dumps(spans), flush=True)
    sys.stdin.readline()
    conn.close()


if __name__ == "__main__":
    main()
