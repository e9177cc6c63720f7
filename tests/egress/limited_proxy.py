"""A proxy in a process of its own whose descriptor limit is the common soft default (1024),
for the exhaustion attack in tests/unit/test_egress_exhaustion.py: the test process holds the
clients and the upstream, so every descriptor counted here is the proxy's.

Argv: the upstream's port, optionally a hard limit too (the soft one's 1024). Prints the
proxy's port; on each empty stdin line, prints how many of 64 files it could still open, then
how many descriptors it holds; `wait N` waits for N records (each flow's sockets closed
too) and prints "recorded"; `fill N` leaves it N free descriptors, `free` gives the rest
back; EOF closes it and prints its records (allowed, bytes up, reason)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import sys

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from tests.polling import until as _until

SOFT = 1024


def _recorded(proxy: EgressProxy, count: int) -> None:
    """`count` records written and their flows' sockets closed. A tunnel's client sees its end
    before the loop records it (the relay's threads hand the end back first), and the loop
    closes the flow's sockets a round after the record: a round through the loop then."""
    assert _until(lambda: len(proxy.records()) >= count)
    proxy._call(asyncio.sleep(0))


def main() -> None:
    port = int(sys.argv[1])
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if len(sys.argv) > 2:
        hard = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, hard))
    proxy = EgressProxy(Rules.parse((f"localhost:{port}", f"127.0.0.1:{port}")))
    proxy.start()
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    print(listener.getsockname()[1], flush=True)
    proxy.serve(listener)
    filled: list[int] = []
    for line in sys.stdin:
        if line.startswith("wait "):
            _recorded(proxy, int(line.split()[1]))
            print("recorded", flush=True)
            continue
        if line.startswith("fill "):
            # Leave exactly N descriptors free: a real EMFILE for the proxy's next steps.
            while True:
                try:
                    filled.append(os.open(os.devnull, os.O_RDONLY))
                except OSError:  # EMFILE: the process is full, as meant
                    break
            for _ in range(int(line.split()[1])):
                os.close(filled.pop())
            print("filled", flush=True)
            continue
        if line.startswith("free"):
            while filled:
                os.close(filled.pop())
            print("freed", flush=True)
            continue
        opened = []
        for _ in range(64):
            try:
                opened.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:  # EMFILE: the count printed says how many could be opened
                break
        print(len(opened), len(os.listdir("/proc/self/fd")), flush=True)
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
    proxy.close()
    for record in proxy.records():
        print(f"{record.allowed} {record.bytes_up} {record.reason}", flush=True)


if __name__ == "__main__":
    main()
