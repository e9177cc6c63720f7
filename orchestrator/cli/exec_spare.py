"""What the exec server prepares for its calls before they come (issue 26): the imports every
call shares (`preload`), and a spare call process, forked *before* the next caller comes, so
the fork and the first touch of what a call runs are paid between calls, not in one.

A served call is a fork of the server (cli/exec_server.py). A fresh fork pays, on the call's
path: the fork itself (~1 ms: the page tables of the preloaded interpreter), and the first
touch of every page the call writes -- a refcount or a cache in an object the server made is
a write, and each page so touched is copied (copy-on-write): click's parse of the call's
arguments cost ~2.7 ms of CPU as a fork's first, ~0.6 ms as its second (measured
2026-12-03). The spare is forked when a call ends (and at the server's start), parses one
exec call of no one's, builds the default config, and then waits on its hand-off socket; the
next accepted caller's connection and the call's two channel ends are handed to it
(SCM_RIGHTS) and it runs the call exactly as a fork would (exec_server._call).

It is used only while it is exactly what a fork made now would be: no call ended since it
was forked (the server's memo, warm containers and shared runtimes are as it saw them).
Otherwise it is killed and the call forked as before. The kept warm containers' owning
connections (core/served_warm.py) it closes at once after its fork -- held while it waits,
a container the server let go would live on with the spare -- and the server hands them
over with the caller (SCM_RIGHTS, their names beside them: a table that is not the spare's
is dropped, and the call makes its own container). Before that hand-off the warm calls had
no spare: a fresh fork on every call's path (issue 26). It holds nothing a call is owed:
killed or gone, no caller notices; when the server ends (stopped, idled out, killed) the
hand-off socket's EOF ends it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sprawl_orch.core import served_warm

# What a call imports lazily, inside functions (found by listing sys.modules after one call
# per arm): 49 modules, ~100 ms a call paid again in every fork until named here.
LAZY = (
    "psutil",
    "resource",
    "netrc",
    "docker",
    "sprawl_orch.cli.copy_progress",
    "sprawl_orch.cli.exec_cmd",
    "sprawl_orch.cli.exec_input",
    "sprawl_orch.tool.exec_tool",
    "sprawl_orch.runs.process",
    "sprawl_orch.container.arm",
    "sprawl_orch.container.create",
    "sprawl_orch.container.admission",
    "sprawl_orch.container.probe_container",
    "sprawl_orch.container.stale_probes",
    "sprawl_orch.container.offer",
    "sprawl_orch.engines.docker",
    "sprawl_orch.engines.docker_attach",
    "sprawl_orch.engines.podman",
    "sprawl_orch.native_fallbacks.bwrap",
    "sprawl_orch.native_fallbacks.copied_tree",
    "sprawl_orch.native_fallbacks.probe",
    "sprawl_orch.native_fallbacks.view_memo",
    # every arm's offer asks whether Landlock is there (found the same way, 2026-12-02:
    # ~16 ms of a copied_tree call's 60 ms were these imports)
    "sprawl_orch.native_fallbacks.landlock",
    "sprawl_orch.native_fallbacks.landlock_helper",
    "sprawl_orch.native_fallbacks.seccomp_landlock",
    # the python arm's side of a call (its runtime is held apart: native_fallbacks/wasi_shared)
    "sprawl_orch.native_fallbacks.wasi_python",
    "encodings.ascii",
    # a warm call's own (issue 26: ~23 ms of a served warm docker call, profiled 2026-12-03)
    "sprawl_orch.container.warm",
    "sprawl_orch.container.warm_exec",
    "sprawl_orch.container.warm_freeze",
    "sprawl_orch.container.warm_host",
    "sprawl_orch.container.warm_program",
    "sprawl_orch.container.warm_run",
    "sprawl_orch.container.warm_served",
)


def preload() -> None:
    """What a call would import: paid once here, shared by every fork (copy-on-write)."""
    import importlib

    from sprawl_orch.cli import main

    for name in LAZY:
        # an optional one (the docker SDK for podman/native users) is imported by the call
        # that needs it, or is never needed
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    command = main.get_command(None, "exec")  # type: ignore[arg-type]
    from sprawl_orch.core.dist_version import installed_version

    installed_version()  # admission's key: a sys.path scan, once here instead of per call
    # One parse of an exec call's arguments, nothing run: what click builds and looks up the
    # first time (its parser, option and type objects, messages) is then the server's, and
    # each fork's first parse costs what a second one does -- ~1 ms of every call's 3 ms of
    # click (measured 2026-12-03).
    if command is not None:
        with main.make_context("sprawl-orch", ["exec", "--", "true"]) as group:
            command.make_context("exec", ["--", "true"], parent=group)


@dataclass
class Spare:
    pid: int
    handoff: socket.socket  # the server's end
    generation: int  # the server's count of ended calls when it was forked


def fork_spare(
    generation: int, leave: Callable[[], None], run: Callable[[socket.socket, int, int], None]
) -> Spare | None:
    """A new spare; `leave` closes what the child must not hold (the listener, other calls'
    connections and channels), `run(conn, teach, keep)` is the call (it never returns).
    None when it can't be made: calls are forked as before."""
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:  # out of descriptors: no spare, the next call is forked as before
        return None
    try:
        pid = os.fork()
    except OSError:  # out of processes or memory: no spare, the next call is forked as before
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        try:
            ours.close()
            leave()
            served_warm.let_go_inherited()
            # only warming: a call handed while it ran is owed its run even if it failed
            with contextlib.suppress(Exception):
                _rehearse()
            conn, teach, keep = _wait(theirs)
        except BaseException:
            os._exit(0)  # nothing was handed over yet: no caller is owed anything
        theirs.close()
        run(conn, teach, keep)  # never returns
        os._exit(125)
    theirs.close()
    return Spare(pid, ours, generation)


def hand(spare: Spare, conn: socket.socket, teach: int, keep: int) -> bool:
    """Give the spare this call, and the owners of the kept warm containers (it closed its
    own copies when it was forked); False (the spare ended) when it can't take it."""
    owners = served_warm.handed()
    if owners is None:  # more kept containers than one message carries: forked as before
        end(spare)
        return False
    names, fds = owners
    try:
        data = b"call" + json.dumps(names).encode()
        socket.send_fds(spare.handoff, [data], [conn.fileno(), teach, keep, *fds])
    except OSError:  # the spare died (EPIPE): reaped, and the call is forked as before
        end(spare)
        return False
    spare.handoff.close()
    return True


def end(spare: Spare) -> None:
    """Kill an unused spare and reap it (it holds no call: nothing is lost)."""
    with contextlib.suppress(ProcessLookupError):  # ended already: a zombie, reaped below
        os.kill(spare.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # reaped already: nothing left of it
        os.waitpid(spare.pid, 0)
    spare.handoff.close()


def _wait(handoff: socket.socket) -> tuple[socket.socket, int, int]:
    data, fds, _, _ = socket.recv_fds(
        handoff, 1 << 20, 3 + len(served_warm.kept), socket.MSG_CMSG_CLOEXEC
    )
    if not data.startswith(b"call") or len(fds) < 3:
        raise EOFError("the server ended without a call for the spare")
    try:
        names = json.loads(data[4:])
    except ValueError:
        names = None
    served_warm.adopt(names if isinstance(names, list) else [], fds[3:])
    return socket.socket(fileno=fds[0]), fds[1], fds[2]


def _rehearse() -> None:
    """What every call does first, done once for no one: its pages are this process's own by
    the time a caller comes. Nothing here is kept for a call but warm pages: the parse is
    thrown away, the config is the defaults every call builds anew."""
    from sprawl_orch.cli import main
    from sprawl_orch.config import load_config

    command = main.get_command(None, "exec")  # type: ignore[arg-type]
    from sprawl_orch.core.dist_version import installed_version

    installed_version()  # admission's key: a sys.path scan, once here instead of per call
    if command is not None:
        with main.make_context("sprawl-orch", ["exec", "--", "true"]) as group:
            command.make_context("exec", ["--", "true"], parent=group)
    load_config(cwd=Path("/nonexistent-sprawl-orch-spare"))
