"""The guardian's EOF logic over a small fake engine (the real engines are in
tests/integration/test_guardian.py)."""

from __future__ import annotations

import secrets
import subprocess
import threading
import time
from collections.abc import Collection
from pathlib import Path

from sprawl_orch.engines.engine import engine_error
from sprawl_orch.engines.sweep import Found
from sprawl_orch.guardian.protocol import Created, Expect, Scratch
from sprawl_orch.guardian.reaper import Reaper, creators, delete_scratch
from sprawl_orch.guardian.watchlist import Watchlist


class FakeEngine:
    """Containers by name; `later` ones appear after a delay (a create in flight)."""

    def __init__(self, name: str = "docker", *, stuck: Collection[str] = ()) -> None:
        self.name = name
        self.containers: dict[str, dict[str, str]] = {}
        self.stuck = set(stuck)  # removal fails for these
        self.lock = threading.Lock()
        self.removed: list[str] = []

    def add(self, name: str, session: str, after: float = 0.0) -> None:
        def put() -> None:
            time.sleep(after)
            with self.lock:
                self.containers[name] = {"id": f"id-{name}", "session": session}

        if after:
            threading.Thread(target=put, daemon=True).start()
        else:
            put()

    def find(self, session: str, names: Collection[str]) -> list[Found]:
        with self.lock:
            return [
                Found(c["id"], n)
                for n, c in self.containers.items()
                if c["session"] == session or n in names
            ]

    def remove(self, refs: Collection[str]) -> list[str]:
        errors = []
        with self.lock:
            for name, c in list(self.containers.items()):
                if name in refs or c["id"] in refs:
                    if name in self.stuck:
                        errors.append(f"{name}: removal failed")
                        continue
                    del self.containers[name]
                    self.removed.append(name)
        return errors


def quiet(event: str, **fields: object) -> None:
    return None


def watch_of(*messages: object) -> Watchlist:
    watch = Watchlist()
    for m in messages:
        watch.apply(m)  # type: ignore[arg-type]
    return watch


def test_announced_and_labelled_containers_go_and_strangers_stay() -> None:
    engine = FakeEngine()
    engine.add("sprawl-s-1", "s")
    engine.add("sprawl-s-2", "s")  # labelled, never announced: still ours
    engine.add("other", "someone-else")
    watch = watch_of(Expect("sprawl-s-1"), Created("sprawl-s-1", "id-sprawl-s-1"))
    # A grace far above what the work takes: sitting it out can't hide in a loaded machine's
    # slowness (a 3 s grace against a 1 s bound left 2 s to spare).
    report = Reaper("s", [engine], 30.0, quiet).reap(watch)
    assert sorted(engine.removed) == ["sprawl-s-1", "sprawl-s-2"]
    assert list(engine.containers) == ["other"]
    assert report.left == [] and report.late == []
    assert report.seconds < 10.0, "nothing in flight: no grace period to sit out"


def test_a_late_create_is_removed_when_it_appears() -> None:
    engine = FakeEngine("podman")
    engine.add("sprawl-s-1", "s", after=0.4)
    report = Reaper("s", [engine], 30.0, quiet).reap(watch_of(Expect("sprawl-s-1")))
    assert report.late == ["sprawl-s-1"]
    assert engine.containers == {}
    assert report.seconds < 10.0, "done as soon as the awaited name was seen and removed"


def test_a_create_that_never_comes_is_awaited_for_the_grace_only() -> None:
    engine = FakeEngine()
    report = Reaper("s", [engine], 0.3, quiet).reap(watch_of(Expect("sprawl-s-1")))
    assert report.late == [] and report.left == []
    assert 0.3 <= report.seconds < 10.0  # the grace, not CREATOR_EXTRA_SECONDS (30 s) more


def test_what_cannot_be_removed_is_reported_left() -> None:
    engine = FakeEngine(stuck={"sprawl-s-1"})
    engine.add("sprawl-s-1", "s")
    report = Reaper("s", [engine], 0.3, quiet).reap(
        watch_of(Expect("sprawl-s-1"), Created("sprawl-s-1", "x"))
    )
    assert report.left == ["sprawl-s-1"]
    assert any("removal failed" in p for p in report.problems)


def test_an_engine_that_cannot_be_asked_does_not_stop_the_others(tmp_path: Path) -> None:
    class Down(FakeEngine):
        def find(self, session: str, names: Collection[str]) -> list[Found]:
            raise engine_error("docker", "ps", "connection refused", "start it")

    up = FakeEngine("podman")
    up.add("sprawl-s-1", "s")
    copy = tmp_path / "sprawl-s-copy"
    copy.mkdir()
    report = Reaper("s", [Down(), up], 0.2, quiet).reap(watch_of(Scratch(copy)))
    assert up.containers == {}
    assert not copy.exists()
    assert "docker ps: connection refused" in report.problems


def test_a_live_create_process_extends_the_wait(tmp_path: Path) -> None:
    """The container lands at 0.6 s, past the 0.2 s grace, while its create (a stand-in
    whose argv names it, as the engine CLI's does) still runs: like an engine's CLI, the
    stand-in ends only after its container exists (a fixed `sleep 0.8` beside a 0.6 s timer
    thread left the order to the scheduler of a loaded machine)."""
    engine = FakeEngine()
    landed = tmp_path / "landed"
    # creators() scans every process on the machine: another session running this same test
    # has a stand-in of its own, so the session (and the name) is this run's alone.
    session = f"s{secrets.token_hex(4)}"
    name = f"sprawl-{session}-1"

    def create() -> None:
        time.sleep(0.6)
        engine.add(name, session)
        landed.touch()

    threading.Thread(target=create, daemon=True).start()
    proc = subprocess.Popen(
        ["sh", "-c", f"until [ -e '{landed}' ]; do sleep 0.02; done", "create", "--name", name]
    )
    try:
        assert creators([name]) == [proc.pid]
        report = Reaper(session, [engine], 0.2, quiet).reap(watch_of(Expect(name)))
    finally:
        proc.kill()
        proc.wait()
    assert report.late == [name] and engine.containers == {}


def test_creators_reads_both_spellings_of_name() -> None:
    ours = f"sprawl-x{secrets.token_hex(4)}"  # not another session's run of this test
    proc = subprocess.Popen(["sh", "-c", "sleep 5", "create", f"--name={ours}-9"])
    try:
        assert creators([f"{ours}-9"]) == [proc.pid]
        assert creators([f"{ours}-8"]) == []
    finally:
        proc.kill()
        proc.wait()


def test_only_scratch_named_directories_are_deleted(tmp_path: Path) -> None:
    mine = tmp_path / "sprawl-s-abc"
    (mine / "d").mkdir(parents=True)
    theirs = tmp_path / "project"
    theirs.mkdir()
    assert delete_scratch(mine) is None and not mine.exists()
    assert delete_scratch(mine) is None  # already gone is fine
    problem = delete_scratch(theirs)
    assert problem is not None and "not a scratch copy name" in problem and theirs.exists()
