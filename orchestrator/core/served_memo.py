"""Facts one call learned, kept for the calls after it (issue 26: "per-call state kept in the
server"). Each served call is a fork of the exec server (cli/exec_server.py), so whatever it
learns dies with it; what it records here is sent back to the server when it ends and is in
every later fork's memory from the start.

A fact is stored under its kind and a key that holds everything its answer depends on --
the stat of the file it was read from, say -- so a changed input is a new key and is asked
again, never answered from memory: nothing here is a time-to-live guess. Outside a server
(the library, the in-process CLI) the memo is simply this process's own.

Only JSON goes back to the server (a fork of the same program, same uid, over a private
pipe; still no pickle: the server never runs what a call sends it).
"""

from __future__ import annotations

import json
import os
from typing import Final

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]

# 64 KiB is a pipe's default capacity: the call writes without blocking before it ends,
# and the server reads after it ended. A larger batch is dropped (asked again next time).
BATCH_LIMIT: Final = 60_000
MEMO_LIMIT: Final = 4096  # entries; the oldest go first

_memo: dict[str, Json] = {}
_learned: dict[str, Json] = {}


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
    _learned[slot] = value
    while len(_memo) > MEMO_LIMIT:
        del _memo[next(iter(_memo))]


def send_learned(fd: int) -> None:
    """The call's end: what it learned, to the server (a non-blocking pipe; best effort)."""
    data = json.dumps(_learned).encode()
    _learned.clear()
    if len(data) > BATCH_LIMIT:
        return
    try:
        os.write(fd, data)
    except OSError:  # the pipe is full or the server went away: the next call asks again
        return


def take_learned(fd: int) -> None:
    """The server's side: merge one ended call's batch (bad JSON: ignored, nothing kept)."""
    data = b""
    try:
        while len(data) <= BATCH_LIMIT and (chunk := os.read(fd, 1 << 16)):
            data += chunk
    except OSError:  # nothing was written (EAGAIN): nothing learned
        return
    if not data or len(data) > BATCH_LIMIT:
        return
    try:
        batch = json.loads(data)
    except ValueError:
        return
    if isinstance(batch, dict):
        for slot, value in batch.items():
            _memo[slot] = value
        while len(_memo) > MEMO_LIMIT:
            del _memo[next(iter(_memo))]
