"""Issue 25's interception against a local echo upstream on 127.0.0.1 (never an outside host):

    . .ci/env && python benchmarks/secrets_proxy.py [--requests 200] [--rounds 3]

Both arms through the same EgressProxy; the only difference is whether the upstream's host is
bound to a secret (intercepted: TLS ended with the run's CA, headers swapped, the response
scrubbed) or not (an opaque CONNECT tunnel). Upstream, proxy and client each in a process of
their own (one interpreter's lock would be shared otherwise), the arms interleaved per round.
1. a small request on one open connection: median of N, ratio intercepted / tunnel (bound
   <= 1.5), both arms' connections in one client, alternating request by request (so both
   meet the same moment's load), and again arm after arm; the proxy's CPU per request;
2. a fresh connection (CONNECT + TLS + one GET): median, the milliseconds added (bound
   <= 10 ms).
Beside both, the floor (tests/secrets/raw_mitm.py): a man-in-the-middle with the same TLS
library and no policy (no HTTP reader, swap, scrub or record), a third connection in the
alternating client and a CPU row of its own: how far above the mechanism the policy is.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets.intercept import Interception
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from tests.secrets.raw_mitm import RawMitm

ROOT = str(Path(__file__).resolve().parent.parent)


def one(
    tmp: Path,
    port: int,
    bound: bool,
    n: int,
    fresh: int | None = None,
    client: str = "bench_client",
    raw: bool = False,
) -> dict[str, Any]:
    """One client run through a proxy of its own; with `fresh`, that many fresh connections
    (else N/10). Adds "cpu": the proxy's CPU seconds (this process's, whose only other
    thread waits for the client). `raw`: the floor (raw_mitm.py) beside the proxy, the
    pair client's third arm; with bench_client, the client goes through the floor alone."""
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
    floor = None
    if raw:
        floor = RawMitm(run.ca.server_context("localhost"), run.upstream_context(), port)
    via = listener.getsockname()[1] if floor is None or client == "bench_pair" else floor.port
    args = [str(bundle), str(port), str(via), str(n)]
    extra = [] if fresh is None else [str(fresh)]
    if floor is not None and client == "bench_pair":
        extra = [str(floor.port)]
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        done = subprocess.run(
            [sys.executable, "-m", f"tests.secrets.{client}", *args, run.env()["TOKEN"], *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        proxy.close()
        if floor is not None:
            floor.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    got = dict(json.loads(done.stdout))
    got["cpu"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    tmp = Path(tempfile.mkdtemp(prefix="sprawl-secrets-bench-"))
    per_round: dict[bool, dict[str, list[float]]] = {
        b: {"request": [], "connect": []} for b in (False, True)
    }
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
            b: {"request": [], "connect": [], "cpu": []} for b in (False, True)
        }
        pair: dict[str, list[float]] = {"tunnel": [], "intercepted": [], "raw": []}
        pair_rounds: list[float] = []
        raw_rounds: list[float] = []
        raw_cpu: list[float] = []
        for _ in range(args.rounds):
            got = one(tmp, port, True, args.requests, client="bench_pair", raw=True)
            for arm in pair:
                pair[arm] += got[arm]
            pair_rounds.append(
                statistics.median(got["intercepted"]) / statistics.median(got["tunnel"])
            )
            raw_rounds.append(statistics.median(got["raw"]) / statistics.median(got["tunnel"]))
            cpu = one(tmp, port, True, args.requests, fresh=0, raw=True)["cpu"]
            raw_cpu.append(cpu / (args.requests + 1))
            for bound in (False, True):
                got = one(tmp, port, bound, args.requests)
                for key in ("request", "connect"):
                    samples[bound][key] += got[key]
                    per_round[bound][key].append(statistics.median(got[key]))
                # The proxy's CPU per request: a run of requests only (one connection).
                cpu = one(tmp, port, bound, args.requests, fresh=0)["cpu"]
                samples[bound]["cpu"].append(cpu / (args.requests + 1))
    finally:
        server.communicate("", timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    def ms(bound: bool, key: str) -> float:
        return statistics.median(samples[bound][key]) * 1000

    tunnel, inter = (statistics.median(pair[arm]) * 1000 for arm in ("tunnel", "intercepted"))
    print(
        f"small request, both arms alternating request by request (one client, one proxy): "
        f"tunnel {tunnel:.2f} ms, intercepted {inter:.2f} ms, ratio intercepted / tunnel "
        f"{inter / tunnel:.2f} "
        f"(bound <= 1.5); per round: {', '.join(f'{r:.2f}' for r in pair_rounds)}"
    )
    floor = statistics.median(pair["raw"]) * 1000
    print(
        f"  the floor in the same client (raw man-in-the-middle, same TLS library, no policy): "
        f"{floor:.2f} ms, ratio raw / tunnel {floor / tunnel:.2f}, intercepted / raw "
        f"{inter / floor:.2f}; per round (raw / tunnel): "
        + ", ".join(f"{r:.2f}" for r in raw_rounds)
    )
    tunnel, inter = ms(False, "request"), ms(True, "request")
    ratios = [
        i / t for t, i in zip(per_round[False]["request"], per_round[True]["request"], strict=True)
    ]
    print(
        f"small request, arms run one after the other: tunnel {tunnel:.2f} ms, intercepted "
        f"{inter:.2f} ms, ratio {inter / tunnel:.2f}; per round: "
        + ", ".join(f"{r:.2f}" for r in ratios)
    )
    cpu_t, cpu_i = ms(False, "cpu"), ms(True, "cpu")
    print(
        f"proxy CPU per request (requests-only runs): tunnel {cpu_t:.3f} ms, intercepted "
        f"{cpu_i:.3f} ms, the raw floor {statistics.median(raw_cpu) * 1000:.3f} ms (the "
        "tunnel's bytes move in the kernel, splice)"
    )
    tunnel_c, inter_c = ms(False, "connect"), ms(True, "connect")
    print(
        f"fresh connection (CONNECT + TLS + GET): tunnel {tunnel_c:.2f} ms, intercepted "
        f"{inter_c:.2f} ms, added {inter_c - tunnel_c:.2f} ms (bound <= 10 ms)"
    )
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
