"""The one budgeted store: entries on disk kept within a byte budget by dropping the oldest
first (kept outputs, runs/output_keep.py; kept changes, changes/store.py; persistent copies,
copy/store.py), and a kept entry dropped so a reader never meets half of it.

Each store says what it holds, how old and how large each entry is, which entries a keep may
never drop (the one just kept; another working directory's unapplied changes; a copy a command
holds) and how one entry goes; the order and the stopping rule are this module's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from sprawl_orch.core.removal import delete_quietly

T = TypeVar("T")


def evict_oldest(
    held: Iterable[T],
    budget: int,
    *,
    size: Callable[[T], int],
    age: Callable[[T], float],
    drop: Callable[[T], bool],
    spare: Callable[[T], bool] = lambda _: False,
    incoming: int = 0,
) -> list[T]:
    """Drop entries, oldest first, until what is held plus `incoming` (bytes about to be
    kept) fits `budget`. A `spare`d entry is never dropped, and one `drop` could not take
    (False: a command holds it) still counts. Returns what was dropped, in order."""
    entries = sorted(held, key=age)
    total = sum(size(e) for e in entries)
    dropped: list[T] = []
    for entry in entries:
        if total + incoming <= budget:
            break
        if spare(entry) or not drop(entry):
            continue
        total -= size(entry)
        dropped.append(entry)
    return dropped


def drop_entry(root: Path, name: str, why: str) -> None:
    """Drop `root/name`: `<name>.gone` says why, then it is renamed away in one step and
    deleted. A drop killed half-way leaves a `.drop-*` no reader opens (a store's sweep
    finishes it), never a half-deleted entry a reader would take as whole."""
    # the note is a courtesy: the drop below happens without it
    with contextlib.suppress(OSError):
        (root / f"{name}.gone").write_text(why + "\n")
    doomed = root / f".drop-{name}-{secrets.token_hex(4)}"
    # gone already (another claimant dropped it): nothing to rename
    with contextlib.suppress(FileNotFoundError):
        os.rename(root / name, doomed)
    delete_quietly(doomed)
