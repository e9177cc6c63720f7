"""`python -m tests.secrets.bench_client CA_BUNDLE PORT PROXY_PORT N HEADER [FRESH]`: N small
GETs on one connection through the proxy's CONNECT tunnel, then FRESH (default N/10, at least
3) fresh connections with one GET each; prints {"request": [s...], "connect": [s...]} as
JSON."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time


def main() -> None:
    bundle, port, proxy_port, n, header = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5],
    )
    fresh = int(sys.argv[6]) if len(sys.argv) > 6 else max(n // 10, 3)
    ctx = ssl.create_default_context(cafile=bundle)

    def connection() -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection("127.0.0.1", proxy_port, context=ctx, timeout=60)
        conn.set_tunnel("localhost", port)
        return conn

    def get(conn: http.client.HTTPSConnection) -> None:
        conn.request("GET", "/small", headers={"authorization": f"Bearer {header}"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status

    conn = connection()
    get(conn)  # the tunnel and TLS made once, outside the samples
    request = []
    for _ in range(n):
        start = time.perf_counter()
        get(conn)
        request.append(time.perf_counter() - start)
    conn.close()
    connect = []
    for _ in range(fresh):
        start = time.perf_counter()
        conn = connection()
        get(conn)
        connect.append(time.perf_counter() - start)
        conn.close()
    print(json.dumps({"request": request, "connect": connect}))


if __name__ == "__main__":
    main()
