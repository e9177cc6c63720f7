"""`python -m sprawl_orch.guardian --session ID --engines docker,podman [--grace S] [--fd N]`
`python -m sprawl_orch.guardian --serve SOCKET [--idle S]`

The first form reads protocol lines (guardian/protocol.py) from stdin, or from fd N, until
EOF: the orchestrator holds the only write end, so EOF means it is gone -- exited, crashed
or SIGKILLed. Then it removes what was left (guardian/reaper.py), writes one JSON line per
step on stderr, and exits: 0 when nothing was left behind, 1 otherwise.

The second serves many callers on a unix socket, each connection a lifeline of its own
(guardian/server.py): what the orchestrator starts by default, one per state directory.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Sequence

from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.guardian._engines import ReaperEngine, open_engine
from sprawl_orch.guardian._lifeline import apply_lines, whole_lines
from sprawl_orch.guardian.protocol import DEFAULT_GRACE
from sprawl_orch.guardian.reaper import Reaper
from sprawl_orch.guardian.watchlist import Watchlist

_LOG_LOCK = threading.Lock()


def log(event: str, **fields: object) -> None:
    line = json.dumps({"t": round(time.time(), 3), "event": event, **fields}, default=str)
    # One line, one write: print() hands the text and its newline to the buffer separately,
    # so two threads (the server's per-caller threads, the engine loader) could interleave
    # into `{...}{...}\n\n`, and guardians sharing one O_APPEND log need whole-line writes.
    # Nobody may be reading our stderr any more: the work matters, not the log.
    with _LOG_LOCK, contextlib.suppress(OSError, ValueError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class EngineLoader(threading.Thread):
    """Open the engine backends while lines are read (`--docker-via sdk` imports the SDK:
    ~200 ms that must not delay reading the pipe)."""

    def __init__(self, names: Sequence[str], docker_via: str) -> None:
        super().__init__(name="engines", daemon=True)
        self.names = names
        self.docker_via = docker_via
        self.engines: list[ReaperEngine] = []

    def run(self) -> None:
        for name in self.names:
            engine = open_engine(name, self.docker_via)
            if engine is None:
                log("engine-missing", engine=name)
            else:
                self.engines.append(engine)
                log("engine", engine=name, via=type(engine).__name__)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sprawl_orch.guardian", description=__doc__)
    parser.add_argument(
        "--serve",
        metavar="SOCKET",
        default=None,
        help="serve many callers on this unix socket (guardian/server.py)",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=None,
        help="with --serve: exit after this many seconds without callers",
    )
    parser.add_argument(
        "--inherit",
        type=int,
        default=None,
        help="with --serve: an inherited connected socket, the first caller",
    )
    parser.add_argument("--session", default=None)
    parser.add_argument("--engines", default="", help="comma-separated: docker,podman")
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE,
        help="seconds after EOF to watch for late creates (default 3)",
    )
    parser.add_argument("--fd", type=int, default=0, help="read from this fd (default stdin)")
    parser.add_argument(
        "--docker-via",
        choices=("sdk", "cli"),
        default="cli",
        help="docker's backend (default cli: see guardian/_engines.py)",
    )
    args = parser.parse_args(argv)
    if args.serve is not None:
        from pathlib import Path

        from sprawl_orch.guardian.server import IDLE_SECONDS, Server

        idle = IDLE_SECONDS if args.idle is None else args.idle
        return Server(Path(args.serve), idle, args.docker_via, log).run(args.inherit)
    if args.session is None:
        parser.error("--session is required (or --serve SOCKET)")
    names = [n for n in args.engines.split(",") if n]
    for name in names:
        if name not in ENGINES:
            parser.error(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")

    loader = EngineLoader(names, args.docker_via)
    loader.start()
    watch = Watchlist()
    log("ready", session=args.session, pid=os.getpid(), engines=names)
    apply_lines(whole_lines(args.fd, log), watch, log)
    eof = time.monotonic()
    log(
        "eof",
        containers=watch.containers,
        pgroups=watch.pgroups,
        scratch=sorted(map(str, watch.scratch)),
        cgroups=sorted(map(str, watch.cgroups)),
    )
    loader.join()
    report = Reaper(args.session, loader.engines, args.grace, log).reap(watch)
    report.seconds = round(time.monotonic() - eof, 3)
    log("done", **dataclasses.asdict(report))
    return 1 if report.left else 0


if __name__ == "__main__":
    sys.exit(main())
