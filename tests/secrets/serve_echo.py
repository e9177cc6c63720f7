"""`python -m tests.secrets.serve_echo DIR`: the echo upstream (keep-alive, HTTP/1.1) in a
process of its own, for benchmarks/secrets_proxy.py. Writes its CA to DIR/ca.pem, prints the
port, serves until stdin closes."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.secrets.echo import echo_upstream

if __name__ == "__main__":
    with echo_upstream() as up:
        (Path(sys.argv[1]) / "ca.pem").write_bytes(up.ca.cert_pem.bytes())
        print(up.port, flush=True)
        sys.stdin.read()
