"""The guards (credential_places.make_guard, copy_guard) built once per exec server, not once
per call (issue 26: a served call is a fresh fork, and building a guard joins every
account's home with every secret place -- hundreds of paths -- each time).

Kept in the served memo (served_memo.py) under a key that holds *everything* make_guard
reads, read again on every call: the account database's homes (pwd.getpwall, ~0.2 ms), the
caller's account home and $HOME, our places, and the real path of each of them (a home
that became a link to elsewhere is a new key). So a remembered guard is exactly the guard
make_guard would build now; only the joining and the building are skipped.

What the call sends back is only the key: the server builds the guard itself, once, with
its never-bind index (served_memo's decoders), and every later fork has it built. So no
guard ever comes from a call's message -- a batch forged on the channel could only make the
server build a real guard.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable
from pathlib import Path

from sprawl_orch.core import served_memo
from sprawl_orch.core.credential_places import (
    RUNTIME,
    SECRETS,
    SYSTEM_DIRS,
    Guard,
    make_guard,
    own_account_home,
)

KIND = "guard"


def _homes() -> list[str] | None:
    try:
        return [e.pw_dir for e in pwd.getpwall()]
    except OSError:
        # no readable account database: make_guard knows only the caller's homes either
        return None


def _key(
    caller_home: str | None, places: tuple[str, ...], system: tuple[str, ...], grants: bool
) -> served_memo.Json:
    homes = _homes()
    own = own_account_home()
    read = [h for h in (caller_home, own, *(homes or ()), *places) if h and h.startswith("/")]
    # every path make_guard resolves, with what it resolves to now: a link retargeted
    # between two calls (a home moved behind a link) is a new key, never a stale guard
    reals: list[served_memo.Json] = [[p, os.path.realpath(p)] for p in dict.fromkeys(read)]
    known: served_memo.Json = None if homes is None else list(homes)
    return [
        os.geteuid(),
        caller_home,
        own,
        known,
        reals,
        list(places),
        list(system),
        grants,
        list(RUNTIME),
        list(SECRETS),
    ]


def _build(key: served_memo.Json, _value: served_memo.Json) -> Guard | None:
    """The server's decoder: the guard built *here* from the inputs the key names, when the
    key is what those inputs give now -- never a guard a call sent (the value is only `true`:
    a batch forged on the call's channel could at most ask for a real guard to be built)."""
    if not (isinstance(key, list) and len(key) == 10):
        return None
    caller_home, places, system, grants = key[1], key[5], key[6], key[7]
    if not (caller_home is None or isinstance(caller_home, str)) or not isinstance(grants, bool):
        return None
    if not (isinstance(places, list) and isinstance(system, list)):
        return None
    if not all(isinstance(p, str) for p in (*places, *system)):
        return None
    place_list = tuple(str(p) for p in places)
    system_list = tuple(str(p) for p in system)
    if _key(caller_home, place_list, system_list, grants) != key:
        return None  # an account, $HOME's target or a place moved since: built by the call
    guard = make_guard(caller_home, [Path(p) for p in place_list], system_list, grants=grants)
    guard.index()  # built here, in the server: every fork has it
    return guard


served_memo.decoder(KIND, _build)


def served_guard(
    caller_home: str | None, places: Iterable[Path], system: Iterable[str] = (), *, grants: bool
) -> Guard:
    """make_guard(caller_home, places, system, grants=grants), from the server's memo when
    nothing it reads has changed."""
    place_list = tuple(str(p) for p in places)
    system_list = tuple(system)
    key = _key(caller_home, place_list, system_list, grants)
    known = served_memo.recall_decoded(KIND, key)
    if isinstance(known, Guard):
        return known
    guard = make_guard(caller_home, [Path(p) for p in place_list], system_list, grants=grants)
    served_memo.learn(KIND, key, True)  # the server builds it (_build) for the next calls
    return guard


def served_copy_guard(caller_home: str | None, places: tuple[Path, ...]) -> Guard:
    """credential_places.copy_guard, kept by the server."""
    return served_guard(caller_home, places, SYSTEM_DIRS, grants=False)
