"""cgroup_counters.read_counter: the one reader of a cgroup's "key value" counters."""

from __future__ import annotations

from pathlib import Path

from sprawl_orch.runs.cgroup_counters import read_counter


def test_the_counter_of_the_key_and_none_without_it(tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n")
    assert read_counter(events, "oom") == 3
    assert read_counter(events, "oom_kill") == 2
    assert read_counter(events, "oom_group_kill") is None


def test_unreadable_or_not_a_number_is_none(tmp_path: Path) -> None:
    assert read_counter(tmp_path / "gone", "max") is None
    odd = tmp_path / "pids.events"
    odd.write_text("max lots\n")
    assert read_counter(odd, "max") is None
