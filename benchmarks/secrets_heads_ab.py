"""The intercepted path's head pieces of two trees side by side, in one process (no network):

    python benchmarks/secrets_heads_ab.py BASE_TREE [BRANCH_TREE] [--rounds 12]

wire.Reader fed a small request and a small answer (each a fresh reader, as a connection's
first message), and head.one_pass writing a plain answer's head: each tree's modules loaded
under names of their own, the arms alternating round by round (so both meet the same load),
process CPU per call, the medians and branch/base. For a change to these two files a full
proxy run (benchmarks/secrets_proxy.py) cannot tell 0.2 us from its noise.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REQUEST = (
    b"GET /small HTTP/1.1\r\nHost: api.test:443\r\nUser-Agent: curl/8\r\nAccept: */*\r\n"
    b"Authorization: Bearer ph_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n\r\n"
)
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\n"
    b"date: Thu\r\nserver: x\r\n\r\nhello world!"
)
HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", b"12"),
    (b"date", b"Thu"),
    (b"server", b"x"),
]
DROP = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive"})


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _reader(wire: Any, n: int) -> None:
    for _ in range(n):
        wire.Reader(False).feed(REQUEST)
        wire.Reader(True).feed(ANSWER)


def _one_pass(head: Any, n: int) -> None:
    for _ in range(n):
        head.one_pass(200, b"OK", HEADERS, DROP, {}, ())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base", type=Path)
    parser.add_argument("branch", type=Path, nargs="?", default=Path(__file__).parent.parent)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    arms = {}
    for arm in ("base", "branch"):
        tree = getattr(args, arm) / "orchestrator" / "secrets"
        arms[arm] = (_load(f"wire_{arm}", tree / "wire.py"), _load(f"head_{arm}", tree / "head.py"))
    got: dict[str, dict[str, list[float]]] = {a: {"reader": [], "one_pass": []} for a in arms}
    n = args.calls
    for round_ in range(args.rounds):
        for arm in ("base", "branch") if round_ % 2 else ("branch", "base"):
            wire, head = arms[arm]
            start = time.process_time()
            _reader(wire, n)
            got[arm]["reader"].append((time.process_time() - start) / n * 1e6)
            start = time.process_time()
            _one_pass(head, 4 * n)
            got[arm]["one_pass"].append((time.process_time() - start) / (4 * n) * 1e6)
    for what in ("reader", "one_pass"):
        base = statistics.median(got["base"][what])
        branch = statistics.median(got["branch"][what])
        print(
            f"{what}: base {base:.3f} us CPU, branch {branch:.3f} us CPU, "
            f"branch/base {branch / base:.3f}"
        )


if __name__ == "__main__":
    main()
