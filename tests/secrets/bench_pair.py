"""`python -m tests.secrets.bench_pair CA_BUNDLE PORT PROXY_PORT N HEADER [RAW_PORT]`: two
connections through the proxy to the same upstream, one an opaque tunnel (CONNECT 127.0.0.1, no
secret bound) and one intercepted (CONNECT localhost, bound), and with RAW_PORT a third through
the policy-free man-in-the-middle there (raw_mitm.py, the floor), N small GETs on each,
alternating one by one; prints {"tunnel": [s...], "intercepted": [s...], "raw": [s...]} as
JSON. Alternating puts both arms
under the same moment's load: on 2 busy cores a run of one arm then the other measured the
load's swings, with ratios from 0.3 to 10 for the same code."""

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
    ctx = ssl.create_default_context(cafile=bundle)
    arms = [("tunnel", "127.0.0.1", proxy_port), ("intercepted", "localhost", proxy_port)]
    if len(sys.argv) > 6:
        arms.append(("raw", "localhost", int(sys.argv[6])))
    conns = {}
    for arm, host, via in arms:
        conn = http.client.HTTPSConnection("127.0.0.1", via, context=ctx, timeout=60)
        conn.set_tunnel(host, port)
        conns[arm] = conn

    def get(conn: http.client.HTTPSConnection) -> None:
        conn.request("GET", "/small", headers={"authorization": f"Bearer {header}"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status

    out: dict[str, list[float]] = {arm: [] for arm in conns}
    for conn in conns.values():
        get(conn)  # the tunnel and TLS made once, outside the samples
    for _ in range(n):
        for arm, conn in conns.items():
            start = time.perf_counter()
            get(conn)
            out[arm].append(time.perf_counter() - start)
    for conn in conns.values():
        conn.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
