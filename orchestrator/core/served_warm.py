"""Warm containers kept by the exec server for the one-shot CLI (issue 26; docs/warm.md).

A kept container is owned by one connection to its state directory's guardian, opened by the
call that made it, with a session of the container's own (its label: the call's own
guardian sweeps the call's session at the call's end, never this one). The call hands that
connection's descriptor to the server at once (SCM_RIGHTS on this module's channel); the
server holds it for the container's life. The guardian sees EOF on it -- and removes the
container -- exactly when the last holder closes it, so:

- a call killed while it holds a kept container never says `back`: the server closes the
  connection when it reaps the call, and the guardian removes the container with whatever
  the command left running in it;
- the server's end (stop, idle exit, SIGKILL) closes every connection it holds (a running
  call's inherited copy closes when that call ends): the guardian removes them all;
- a descriptor in flight keeps the connection open after its sender died (the kernel holds
  it in the socket's queue until the server reads it), so no container is ever owned by no
  one.

Every call is a fork of the server and inherits the table (`kept`) as it was at the fork:
a call takes an idle container of its key by an exclusive flock on its lock file (the
kernel drops it with the call: two calls never share one), and only when the file says
`clean <generation>` with the generation the table holds -- a holder that died mid-command
left `busy`. The table's records come only from this channel, never from those files.

Only JSON and descriptors travel, over SOCK_SEQPACKET (served_memo.py says why not a pipe).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import dataclass
from typing import Final

from sprawl_orch.core.exec_place import runtime_dir

KEEP_PER_KEY: Final = 4  # as the library's warm.IDLE: the oldest idle one goes first
MESSAGE_LIMIT: Final = 200_000


@dataclass
class Kept:
    fd: int  # the guardian connection that owns the container
    key: str
    record: dict[str, object] | None = None  # None: held by a call, not given back
    generation: int = 0
    holder: int = 0  # the pid of the call that holds it (0: idle)


kept: dict[str, Kept] = {}
_call_end: int | None = None  # in a call: its end of the channel


def channel() -> tuple[int, int]:
    """(the server's end, the call's end): non-blocking, closed on exec."""
    ours, theirs = socket.socketpair(
        socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    )
    return ours.detach(), theirs.detach()


def in_call(fd: int) -> None:
    """In the forked call: where its messages go (a process that never calls this is not a
    served call, and keeps its warm containers itself)."""
    global _call_end
    _call_end = fd


def served() -> bool:
    return _call_end is not None


# -- the call's side -------------------------------------------------------------------------
def _send(message: dict[str, object], fds: tuple[int, ...] = ()) -> None:
    if _call_end is None:
        raise OSError("not a served call")
    data = json.dumps(message).encode()
    if len(data) > MESSAGE_LIMIT:
        raise OSError(f"a message of {len(data)} bytes (limit {MESSAGE_LIMIT})")
    sock = socket.socket(fileno=os.dup(_call_end))
    try:
        socket.send_fds(sock, [data], list(fds))
    finally:
        sock.close()


def offers(key: str) -> list[tuple[str, Kept]]:
    """Idle kept containers of `key`, newest first (as the server's table was at the fork)."""
    found = [(n, k) for n, k in kept.items() if k.key == key and k.record is not None]
    return found[::-1]


def hold(name: str, key: str, link: int) -> None:
    """A new kept container's owning connection, to the server before the container exists."""
    _send({"op": "hold", "name": name, "key": key}, (link,))


def keep_only(name: str | None) -> None:
    """In a call, before its command: every inherited owning connection closed but that of
    the container it took (`name`). Held through a command, they kept the guardian from
    seeing EOF after the server closed its copy: a killed client's container, and the
    command running on in it, lived as long as any call forked after it was given back."""
    for other in [n for n in kept if n != name]:
        _close(other, unlink=False)  # still the server's: only this call's copy closed


def take(name: str) -> None:
    _send({"op": "take", "name": name})


def back(name: str, generation: int, record: dict[str, object]) -> None:
    _send({"op": "back", "name": name, "generation": generation, "record": record})


def drop(name: str) -> None:
    _send({"op": "drop", "name": name})


# -- the server's side -----------------------------------------------------------------------
def take_messages(fd: int, pid: int) -> None:
    """After the call `pid` ended: apply what it said, in order; what it held and did not
    give back is dropped (its connection closed: the guardian removes the container)."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MESSAGE_LIMIT, 4, socket.MSG_CMSG_CLOEXEC)
            except OSError:  # EAGAIN: every message read; what it held and did not say is dropped
                break
            if not data:
                break
            _apply(data, fds, pid)
    finally:
        sock.close()
    for name in [n for n, k in kept.items() if k.holder == pid]:
        _close(name)
    _trim()


def _apply(data: bytes, fds: list[int], pid: int) -> None:
    try:
        message = json.loads(data)
        op, name = message["op"], message["name"]
        if not isinstance(name, str):
            raise TypeError(name)
    except (ValueError, KeyError, TypeError):
        for fd in fds:
            os.close(fd)
        return
    if op == "hold" and len(fds) == 1 and name not in kept:
        kept[name] = Kept(fds[0], str(message.get("key")), holder=pid)
        return
    for fd in fds:  # only `hold` carries one
        os.close(fd)
    entry = kept.get(name)
    if entry is None:
        return
    if op == "take":
        entry.holder, entry.record = pid, None
    elif op == "back" and entry.holder == pid and isinstance(message.get("record"), dict):
        entry.record, entry.holder = message["record"], 0
        entry.generation = int(message.get("generation") or 0)
        kept[name] = kept.pop(name)  # the newest last
    elif op == "drop":
        _close(name)


def _trim() -> None:
    by_key: dict[str, list[str]] = {}
    for name, entry in kept.items():
        if entry.record is not None:
            by_key.setdefault(entry.key, []).append(name)
    for names in by_key.values():
        for name in names[: max(0, len(names) - KEEP_PER_KEY)]:
            _close(name)


def _close(name: str, unlink: bool = True) -> None:
    entry = kept.pop(name, None)
    if entry is not None:
        with contextlib.suppress(OSError):  # closed already: the guardian saw EOF
            os.close(entry.fd)
    if unlink:  # the server dropped it: its lock file goes too (a call holding it reads no
        # `clean` in a file made again at that name)
        with contextlib.suppress(OSError):  # never made, or unlinked by the call that dropped it
            os.unlink(runtime_dir(dict(os.environ)) / "warm" / f"{name}.lock")


# -- a spare call (cli/exec_spare.py): forked before its caller, handed the owners then -----
HAND_LIMIT: Final = 250  # SCM_RIGHTS carries at most 253 descriptors; 3 are the call's own


def let_go_inherited() -> None:
    """In a spare, at once after its fork: its copies of the owning connections closed (the
    table's records kept). Held while it waits, a container the server let go would live on
    as long as the spare; the server hands the owners over with the caller (`handed`)."""
    for entry in kept.values():
        with contextlib.suppress(OSError):  # closed already
            os.close(entry.fd)
        entry.fd = -1


def handed() -> tuple[list[str], list[int]] | None:
    """The server's side of a hand-off: (names, their owning connections) in the table's
    order; None when there are too many to hand in one message (the call is forked)."""
    if len(kept) > HAND_LIMIT:
        return None
    return list(kept), [entry.fd for entry in kept.values()]


def adopt(names: list[str], fds: list[int]) -> None:
    """In a spare given a call: the owners the server handed, put back in its table. A table
    that is not the one the spare was forked with (it never is: the server does not hand a
    spare forked before a call ended) is dropped whole, never guessed at: the call then
    makes a container of its own, as with no kept one."""
    if names == list(kept) and len(fds) == len(names):
        for entry, fd in zip(kept.values(), fds, strict=True):
            entry.fd = fd
        return
    for fd in fds:
        os.close(fd)
    kept.clear()


def close_all() -> None:
    """The server's end: every kept container's connection closed (the guardian removes
    them)."""
    for name in list(kept):
        _close(name)
