"""`python -I .../wasi_runtime.py SOCK MODULE_FD`: the python arm's runtime process.

One per arm (per ExecTool), a child of sprawl-orch. A fresh Python per command spent 0.9-1.2 s
before the guest ran (the interpreter's start, `import wasmtime`, the module mapped: issue 31),
so this process pays that once: it imports wasmtime, maps the compiled module through the fd
sprawl-orch verified, then forks one process per command. The fork happens with one thread:
wasmtime starts none to deserialize (checked: /proc/self/task had 1 entry after Engine +
Module.deserialize_file; compiling starts a pool, which is why the compile is never done
here), and this loop starts none either.

Each forked command is a new session (its own process group, which sprawl-orch announces to
the guardian and kills, as for any host command), gets its own Store, instance, fuel, memory
limit, wall-time deadline and private /tmp (wasi_guest.run), and inherits nothing a guest can
reach from here: the guest sees only its store, and this process never runs a guest. It waits
on its go fd before running, so sprawl-orch can announce it and put it in the run's cgroup
first (EOF instead of a byte: sprawl-orch is gone, it ends 125).

Requests on SOCK (a stream socket; a 4-byte length, then JSON; fds as SCM_RIGHTS):
`{"op": "run", "spec": {...}}` with fds [stdout, stderr, go] -> `{"pid": N}` once the child
is in its own session; `{"op": "reap", "pid": N}` -> `{"status": S}` (the child is reaped only
when asked, so its pid cannot be reused while sprawl-orch signals it). EOF ends this process:
sprawl-orch closed it, or died.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import struct
import sys
import traceback
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("!I")
_GATE_EXIT = 125  # as HostProcess's gate: never released, never run


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [_HEADER.pack(len(data)) + data], fds or [])


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the fds that came with it; (None, []) at EOF."""
    head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, 8)
    if not head:
        return None, fds
    while len(head) < _HEADER.size:
        more = sock.recv(_HEADER.size - len(head))
        if not more:
            return None, fds
        head += more
    (size,) = _HEADER.unpack(head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


def _guest_module() -> Any:
    # By path, as this file is run: -I keeps native_fallbacks/ off sys.path, and importing
    # sprawl_orch here would cost its package's import in this process for nothing.
    where = Path(__file__).with_name("wasi_guest.py")
    spec = importlib.util.spec_from_file_location("_sprawl_wasi_guest", where)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up there
    spec.loader.exec_module(module)
    return module


def load(guest: Any, module_fd: int) -> tuple[Any, Any]:
    """The module mapped through the fd sprawl-orch verified (the bytes hashed are the bytes
    mapped), as the per-command child did. Reading and hashing it again here cost a one-shot
    CLI command ~0.1-0.3 s for nothing: sprawl-orch checks the file's state before every
    fork (VerifiedModule) and replaces this process when it changed."""
    import wasmtime

    engine = guest.make_engine()
    module = wasmtime.Module.deserialize_file(engine, f"/dev/fd/{module_fd}")
    os.close(module_fd)
    return engine, module


def _child(guest: Any, loaded: tuple[Any, Any], spec: dict[str, Any], fds: list[int]) -> None:
    """The forked command; never returns."""
    code = 1
    try:
        out, err, go = fds
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        if not os.read(go, 1):
            os._exit(_GATE_EXIT)
        os.close(go)
        report = guest.run(spec, loaded)
        Path(spec["report"]).write_text(json.dumps(report), encoding="utf-8")
        code = int(report["exit_code"])
    except BaseException:
        # no report: sprawl-orch says the runtime failed, with this on the command's stderr
        traceback.print_exc()
    finally:
        os._exit(code)


def serve(sock: socket.socket, guest: Any, loaded: tuple[Any, Any]) -> None:
    while True:
        message, fds = receive(sock)
        if message is None:
            return
        if message["op"] == "run":
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.close(ready_r)
                os.setsid()  # before sprawl-orch hears the pid: the group it kills is this
                os.close(ready_w)
                _child(guest, loaded, message["spec"], fds)
            os.close(ready_w)
            os.read(ready_r, 1)  # EOF once the child is in its session (or died)
            os.close(ready_r)
            for fd in fds:
                os.close(fd)
            send(sock, {"pid": pid})
        elif message["op"] == "reap":
            try:
                _, status = os.waitpid(int(message["pid"]), 0)
                send(sock, {"status": os.waitstatus_to_exitcode(status)})
            except ChildProcessError:
                send(sock, {"status": None})


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    guest = _guest_module()
    try:
        loaded = load(guest, int(sys.argv[2]))
    except Exception as err:
        send(sock, {"error": f"{type(err).__name__}: {err}"})
        return 1
    # A fork copies only the calling thread: one that held a lock wasmtime needs would leave
    # it held in every command. Checked where it can be (Linux), not assumed.
    with contextlib.suppress(FileNotFoundError):
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            send(sock, {"error": f"{threads} threads after loading: forking is not safe"})
            return 1
    send(sock, {"ready": os.getpid()})
    serve(sock, guest, loaded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
