"""Facts one call learned, kept for the calls after it (issue 26: "per-call state kept in the
server"). Each served call is a fork of the exec server (cli/exec_server.py), so whatever it
learns dies with it; what it records here is sent back to the server when it ends and is in
every later fork's memory from the start.

A fact is stored under its kind and a key that holds everything its answer depends on --
the stat of the file it was read from, say -- so a changed input is a new key and is asked
again, never answered from memory: nothing here is a time-to-live guess. Outside a server
(the library, the in-process CLI) the memo is simply this process's own.

Only JSON goes back to the server (a fork of the same program, same uid; still no pickle:
the server never runs what a call sends it), over a SOCK_SEQPACKET socket pair, not a pipe:
a copied_tree command runs as the caller's uid with no namespace, and a pipe's end is opened
for writing by anyone of that uid through /proc/<call or server>/fd/N -- a forged batch,
ending in `"x":` so the call's own batch completed its JSON, was merged by the server. A
socket's /proc link cannot be opened (ENXIO), and the server takes exactly one message: a
second one on the channel (someone else's) drops the batch.
"""

from __future__ import annotations

import gc
import json
import os
import socket
from collections.abc import Callable
from typing import Final

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]

# Well under a unix socket's default send buffer (~208 KiB): the call's one message goes
# without blocking before it ends, and the server reads after it ended. What does not fit
# is left out (asked again next time).
BATCH_LIMIT: Final = 60_000
MEMO_LIMIT: Final = 4096  # entries; the oldest go first

_memo: dict[str, Json] = {}
_learned: dict[str, Json] = {}
# A kind's decoder turns its JSON into the object a call uses (a guard: ~1000 paths and
# their index, ~5 ms to build); the server decodes what it is taught, once, and every fork
# has the object from the start. Nothing decoded is trusted more than its JSON: the object
# is what the decoder makes of the value kept under the same key.
_decoders: dict[str, Callable[[Json, Json], object]] = {}
_decoded: dict[str, object] = {}


class _Miss:
    pass


MISS: Final = _Miss()


def _slot(kind: str, key: Json) -> str:
    return json.dumps([kind, key], sort_keys=True, separators=(",", ":"))


def recall(kind: str, key: Json) -> Json | _Miss:
    return _memo.get(_slot(kind, key), MISS)


def learn(kind: str, key: Json, value: Json) -> None:
    slot = _slot(kind, key)
    _memo[slot] = value
    _decoded.pop(slot, None)
    _learned[slot] = value
    _trim()


def _trim() -> None:
    while len(_memo) > MEMO_LIMIT:
        _decoded.pop(next(iter(_memo)), None)
        del _memo[next(iter(_memo))]


def decoder(kind: str, decode: Callable[[Json, Json], object]) -> None:
    """Register how facts of `kind` become objects, from (key, value) (at import: the server
    imports it)."""
    _decoders[kind] = decode


def recall_decoded(kind: str, key: Json) -> object:
    """The decoded fact under `key` (decoded once per process, or by the server before the
    fork), MISS when none is kept."""
    slot = _slot(kind, key)
    if slot in _decoded:
        return _decoded[slot]
    value = _memo.get(slot, MISS)
    if isinstance(value, _Miss):
        return MISS
    decode = _decoders.get(kind)
    _decoded[slot] = made = value if decode is None else decode(key, value)
    return made


def take(kind: str) -> list[Json]:
    """The keys of every fact of `kind`, removed from the memo: a request the server acts on
    once (native_fallbacks/wasi_shared.py), not a fact to answer from."""
    keys: list[Json] = []
    for slot in [s for s in _memo if s.startswith(_slot(kind, None)[: -len("null]")])]:
        del _memo[slot]
        keys.append(json.loads(slot)[1])
    return keys


def channel() -> tuple[int, int]:
    """(the server's end, the call's end): non-blocking, closed on exec (the command run
    never holds either)."""
    ours, theirs = socket.socketpair(
        socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    )
    return ours.detach(), theirs.detach()


def send_learned(fd: int) -> None:
    """The call's end: what it learned, to the server, as one message (best effort)."""
    # The smallest facts first, as many as fit: one large fact (a guard on a machine of many
    # accounts) is asked again next time, and does not take every other fact down with it.
    sized = sorted((len(json.dumps([s, v])), s, v) for s, v in _learned.items())
    _learned.clear()
    batch: dict[str, Json] = {}
    room = BATCH_LIMIT - 2
    for size, slot, value in sized:
        if size > room:
            break
        batch[slot] = value
        room -= size
    data = json.dumps(batch).encode()
    if len(data) > BATCH_LIMIT:
        return
    try:
        os.write(fd, data)
    except OSError:  # the pipe is full or the server went away: the next call asks again
        return


def take_learned(fd: int) -> None:
    """The server's side: merge one ended call's batch, its only message (bad JSON, a
    second message -- not the call's -- or none: nothing kept)."""
    try:
        data = os.read(fd, BATCH_LIMIT + 1)
    except OSError:  # nothing was written (EAGAIN): nothing learned
        return
    try:
        if os.read(fd, 1):
            return  # a second message: someone else wrote on the channel
    except BlockingIOError:  # the only message: the call's
        pass
    if not data or len(data) > BATCH_LIMIT:
        return
    try:
        batch = json.loads(data)
    except ValueError:
        return
    if isinstance(batch, dict):
        made = 0
        for slot, value in batch.items():
            _memo[slot] = value
            _decoded.pop(slot, None)
            made += _decode_ahead(slot, value)
        _trim()
        if made:
            # What was decoded (a guard: thousands of objects) lives as long as the server:
            # out of the collector's reach, or each fork's first full collection walks it --
            # and every page of the heap it touches is copied (~20 ms a call, measured).
            gc.freeze()


def _decode_ahead(slot: str, value: Json) -> int:
    try:
        kind, key = json.loads(slot)
    except (ValueError, TypeError):
        return 0  # not a slot of ours: kept as JSON, never decoded
    decode = _decoders.get(kind) if isinstance(kind, str) else None
    if decode is None:
        return 0
    _decoded[slot] = decode(key, value)
    return 1
