"""`python -m tests.egress.serve_upstream DIR`: a TLS upstream in a process of its own (the
benchmark's, so the proxy and the server don't share one interpreter's lock). Writes the CA
to DIR/ca.pem, prints the port, serves until stdin closes."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.egress.upstream import upstream

if __name__ == "__main__":
    with upstream(tls=True) as up:
        assert up.ca is not None
        up.ca.cert_pem.write_to_path(str(Path(sys.argv[1]) / "ca.pem"))
        print(up.port, flush=True)
        sys.stdin.read()
