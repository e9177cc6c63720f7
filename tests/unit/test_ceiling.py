"""The seed's Lean theorems about ceilingAt and enterTrace, as properties over all inputs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.runs.affinity import (
    Absent,
    Accepted,
    AffinityRefused,
    Created,
    CreationRefused,
    JobCreated,
    Unrequested,
    affinity_of,
    enter_job,
    enter_trace,
)
from sprawl_orch.runs.ceiling import (
    CeilingMark,
    NotAsked,
    Unapplied,
    Unread,
    Watching,
    Why,
    ceiling_at,
)

limits = st.integers(min_value=1, max_value=2**63)
counts = st.integers(min_value=0, max_value=2**40)
marks: st.SearchStrategy[CeilingMark] = st.one_of(
    st.just(NotAsked()),
    st.builds(Unapplied, limits, st.sampled_from(Why)),
    st.builds(Unread, limits),
    st.builds(Watching, limits, counts),
)
reads = st.none() | counts


@given(marks, reads)
def test_hit_only_when_the_count_moved(mark: CeilingMark, read: int | None) -> None:
    moved = isinstance(mark, Watching) and read is not None and mark.before < read
    assert (ceiling_at(mark, read).state == "hit") == moved


@given(marks, reads)
def test_an_asked_ceiling_is_silent_only_when_held_and_unhit(
    mark: CeilingMark, read: int | None
) -> None:
    if isinstance(mark, NotAsked) or ceiling_at(mark, read).state != "silent":
        return
    assert isinstance(mark, Watching)
    assert read is not None and read <= mark.before


@given(marks, reads)
def test_the_result_key_speaks_exactly_when_not_silent(mark: CeilingMark, read: int | None) -> None:
    report = ceiling_at(mark, read)
    key = report.as_result()
    if report.state == "silent":
        assert key is None
        return
    assert key is not None
    assert key["state"] == report.state
    assert key["limit_bytes"] == mark.limit  # type: ignore[union-attr]
    assert key["detail"]
    assert ("why" in key) == (report.state == "unapplied")
    if isinstance(mark, Unapplied):
        assert key["why"] == mark.why.value


def test_the_cases_of_ceiling_at() -> None:
    assert ceiling_at(NotAsked(), 5).state == "silent"
    assert ceiling_at(Unapplied(10, Why.UNJOINED), None).state == "unapplied"
    assert ceiling_at(Unread(10), 3).state == "unread"
    assert ceiling_at(Watching(10, 2), None).state == "unread"
    assert ceiling_at(Watching(10, 2), 2).state == "silent"
    assert ceiling_at(Watching(10, 2), 3).as_result() == {
        "state": "hit",
        "limit_bytes": 10,
        "detail": ceiling_at(Watching(10, 2), 3).as_result()["detail"],  # type: ignore[index]
    }


masks = st.integers(min_value=1, max_value=2**64)
attempts = st.one_of(st.just(Unrequested()), st.builds(Accepted, masks), st.just(AffinityRefused()))
entries = st.one_of(st.just(CreationRefused()), st.builds(JobCreated, attempts))


@given(st.none() | masks, st.lists(entries))
def test_created_job_keeps_affinity_on_every_trace(mask: int | None, trace: list[object]) -> None:
    assert enter_trace(Created(mask), trace) == Created(mask)  # type: ignore[arg-type]


@given(st.lists(entries))
def test_the_first_created_entry_fixes_the_affinity(trace: list[object]) -> None:
    state = enter_trace(Absent(), trace)  # type: ignore[arg-type]
    first = next((e for e in trace if isinstance(e, JobCreated)), None)
    if first is None:
        assert state == Absent() and affinity_of(state) == "os"
    else:
        held = first.attempt.mask if isinstance(first.attempt, Accepted) else None
        assert state == Created(held)
        assert affinity_of(state) == (held if held is not None else "os")


def test_refused_creation_can_be_retried() -> None:
    state = enter_job(Absent(), CreationRefused())
    assert state == Absent()
    assert enter_job(state, JobCreated(Accepted(3))) == Created(3)
