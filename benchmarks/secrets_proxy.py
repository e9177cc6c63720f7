"""Issue 25's interception against a local echo upstream on 127.0.0.1 (never an outside host):

    . .ci/env && python benchmarks/secrets_proxy.py [--requests 200] [--rounds 3]

Both arms through the same EgressProxy; the only difference is whether the upstream's host is
bound to a secret (intercepted: TLS ended with the run's CA, headers swapped, the response
scrubbed) or not (an opaque CONNECT tunnel). Upstream, proxy and client each in a process of
their own (one interpreter's lock would be shared otherwise), the arms interleaved per round.
1. a small request on one open connection: median of N, ratio intercepted / tunnel (bound
   <= 1.5);
2. a fresh connection (CONNECT + TLS + one GET): median, the milliseconds added (bound
   <= 10 ms).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets.intercept import Interception
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec

ROOT = str(Path(__file__).resolve().parent.parent)


def one(tmp: Path, port: int, bound: bool, n: int) -> dict[str, list[float]]:
    host = "localhost" if bound else "elsewhere.invalid"
    spec = Spec("TOKEN", Rules.parse((host,)), (host,), "real-value-for-the-benchmark")
    run = SecretRun((spec,), upstream_cafile=str(tmp / "ca.pem"))
    proxy = EgressProxy(
        Rules.parse((f"localhost:{port}", "127.0.0.1", "::1")), secrets=Interception(run)
    )
    proxy.start()
    listener = socket.create_server(("127.0.0.1", 0))
    proxy.serve(listener)
    bundle = tmp / "bundle.pem"
    bundle.write_bytes((tmp / "ca.pem").read_bytes() + run.ca.pem)
    args = [str(bundle), str(port), str(listener.getsockname()[1]), str(n)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.secrets.bench_client", *args, run.env()["TOKEN"]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        proxy.close()
    return dict(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sprawl-secrets-bench-"))
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
        samples: dict[bool, dict[str, list[float]]] = {
            b: {"request": [], "connect": []} for b in (False, True)
        }
        for _ in range(args.rounds):
            for bound in (False, True):
                got = one(tmp, port, bound, args.requests)
                for key in ("request", "connect"):
                    samples[bound][key] += got[key]
    finally:
        server.communicate("", timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    def ms(bound: bool, key: str) -> float:
        return statistics.median(samples[bound][key]) * 1000

    tunnel, inter = ms(False, "request"), ms(True, "request")
    print(
        f"small request on one connection: tunnel {tunnel:.2f} ms, intercepted {inter:.2f} ms, "
        f"ratio intercepted / tunnel {inter / tunnel:.2f} (bound <= 1.5)"
    )
    tunnel_c, inter_c = ms(False, "connect"), ms(True, "connect")
    print(
        f"fresh connection (CONNECT + TLS + GET): tunnel {tunnel_c:.2f} ms, intercepted "
        f"{inter_c:.2f} ms, added {inter_c - tunnel_c:.2f} ms (bound <= 10 ms)"
    )


if __name__ == "__main__":
    main()
