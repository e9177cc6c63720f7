"""A confined command floods the proxy (bwrap, for real): 300 tunnels at once to a listed
upstream on 127.0.0.1 that accepts nothing (the kernel's backlog completes the connections and
keeps what the tunnels carry). The proxy's cap holds (256 spliced tunnels open, two threads
each, the rest 503, every one recorded), and the orchestrator's process gets its descriptors
and threads back once the run ends: the flood costs the host nothing that outlives it."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.egress.netns import PROXY_PORT
from sprawl_orch.egress.proxy import MAX_CONNECTIONS
from tests.integration.conftest import missing

FLOOD = 300

# Inside: open FLOOD tunnels, each CONNECT + a real ClientHello (its SNI the listed name),
# all held open together; print how many the proxy answered 200 and 503.
_SCRIPT = """
import socket, ssl, sys
port, n, proxy = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held, codes = [], {}
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", proxy), timeout=60)
    s.sendall(f"CONNECT localhost:{port} HTTP/1.1\\r\\nhost: localhost:{port}\\r\\n\\r\\n".encode())
    head = b""
    while b"\\r\\n\\r\\n" not in head and (c := s.recv(4096)):
        head += c
    code = head.split(b" ")[1].decode() if head else "closed"
    codes[code] = codes.get(code, 0) + 1
    if code == "200":
        i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
        t = ssl.create_default_context().wrap_bio(i, o, server_hostname="localhost")
        try:
            t.do_handshake()
        except ssl.SSLWantReadError:
            pass
        s.sendall(o.read())
    held.append(s)
print(" ".join(f"{k}={v}" for k, v in sorted(codes.items())))
"""


@pytest.fixture(scope="module")
def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    return found


@pytest.fixture
def sink() -> Iterator[socket.socket]:
    """A listener never accepted from: every tunnel's upstream stays open, its bytes unread."""
    with socket.create_server(("127.0.0.1", 0), backlog=1024) as listener:
        yield listener


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_flood_of_tunnels_is_capped_and_leaves_nothing(
    bwrap: str, tmp_path: Path, sink: socket.socket
) -> None:
    python = shutil.which("python3")
    assert python is not None
    port = sink.getsockname()[1]
    allow = [f"localhost:{port}", f"127.0.0.1:{port}"]
    config = parse_config(
        {
            "sandbox": {"arm": "native", "network": {"allow": allow}},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    work = tmp_path / "work"
    work.mkdir()
    with ExecTool(config, work) as tool:
        tool.exec(["true"], timeout=120)  # what the tool keeps open is made by now
        fds, threads = _fds(), threading.active_count()
        argv = [python, "-c", _SCRIPT, str(port), str(FLOOD), str(PROXY_PORT)]
        flood = tool.exec(argv, timeout=600)
        after_fds, after_threads = _fds(), threading.active_count()
    assert flood.exit_code == 0, flood.stderr
    assert flood.stdout.split() == [f"200={MAX_CONNECTIONS}", f"503={FLOOD - MAX_CONNECTIONS}"]
    assert flood.network is not None
    records = flood.network["egress"]
    allowed = [e for e in records if e["allowed"]]
    capped = [e for e in records if "connections open" in e["reason"]]
    assert len(records) == FLOOD and len(allowed) == MAX_CONNECTIONS
    assert len(capped) == FLOOD - MAX_CONNECTIONS
    assert all(e["bytes_up"] > 0 for e in allowed)  # each carried its ClientHello up
    assert after_fds <= fds + 2 and after_threads <= threads + 1, (fds, after_fds, threads)
