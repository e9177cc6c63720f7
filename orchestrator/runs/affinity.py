"""A run's job and its CPU affinity: the seed's RunJobState model (Windows job bookkeeping).

The first command of a run that gets a job (Windows) or a run cgroup (Linux) fixes what the run
holds; later commands reuse it and never ask again. Creation that was refused leaves the run
without one, so the next command may try again. This is the Lean model, case for case:

    enterJob : RunJobState → JobEntry → RunJobState
    | .created mask, _                  => .created mask
    | .absent, .creationRefused         => .absent
    | .absent, .created attempt         => .created (heldAffinity attempt)

and `created_job_keeps_affinity_on_every_trace` is a property test (tests/unit/test_ceiling.py).
Off Windows nothing applies an affinity mask, so every attempt is `Unrequested` and a run's
affinity reads "os" (the operating system's choice).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from typing import Literal


@dataclass(frozen=True)
class Unrequested:
    pass


@dataclass(frozen=True)
class Accepted:
    mask: int

    def __post_init__(self) -> None:
        if self.mask <= 0:
            raise ValueError(f"an accepted affinity mask is non-zero, got {self.mask}")


@dataclass(frozen=True)
class AffinityRefused:
    pass


AffinityAttempt = Unrequested | Accepted | AffinityRefused


def held_affinity(attempt: AffinityAttempt) -> int | None:
    return attempt.mask if isinstance(attempt, Accepted) else None


@dataclass(frozen=True)
class Absent:
    """The run has no job (or cgroup) yet."""


@dataclass(frozen=True)
class Created:
    affinity: int | None


RunJobState = Absent | Created


@dataclass(frozen=True)
class CreationRefused:
    pass


@dataclass(frozen=True)
class JobCreated:
    attempt: AffinityAttempt


JobEntry = CreationRefused | JobCreated


def enter_job(state: RunJobState, entry: JobEntry) -> RunJobState:
    if isinstance(state, Created):
        return state
    if isinstance(entry, CreationRefused):
        return Absent()
    return Created(held_affinity(entry.attempt))


def enter_trace(state: RunJobState, entries: Iterable[JobEntry]) -> RunJobState:
    return reduce(enter_job, entries, state)


def affinity_of(state: RunJobState) -> int | Literal["os"]:
    """What `processes()` reports: the mask the run's job holds, or "os"."""
    if isinstance(state, Created) and state.affinity is not None:
        return state.affinity
    return "os"
