"""Per-run cgroups and the guardian: what cgroups.py announces, and what the reaper does with it
at EOF, over a temporary directory tree standing in for cgroupfs (as tests/unit/test_cgroups.py
does). The real v1 hierarchies are in tests/integration/test_guardian_cgroups.py."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest

import sprawl_orch.guardian._cgroup_reap
from sprawl_orch.guardian._cgroup_reap import is_ours, remove_cgroups
from sprawl_orch.guardian.protocol import Announcement, Cgroup, CgroupGone
from sprawl_orch.guardian.reaper import Reaper
from sprawl_orch.guardian.watchlist import Watchlist
from sprawl_orch.runs.cgroups import CgroupRefused, Cgroups, delegation
from sprawl_orch.runs.launch import Watcher
from sprawl_orch.runs.shares import Shares
from tests.unit.test_cgroups import V1_SELF, fake_rmdir, v1_tree

MIB = 2**20


def quiet(event: str, **fields: object) -> None:
    return None


class Ear(Watcher):
    """Hears cgroup announcements, noting whether the directory existed when it was told."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, Path, bool]] = []

    def tell(self, message: Announcement) -> None:
        # containers, groups, copies: not this test's business
        if isinstance(message, Cgroup | CgroupGone):
            verb = "cgroup" if isinstance(message, Cgroup) else "cgroup-gone"
            self.heard.append((verb, message.path, message.path.exists()))


def cgroup_dir(path: Path, pids: str = "") -> Path:
    path.mkdir(parents=True)
    (path / "cgroup.procs").write_text(pids)
    (path / "cpu.shares").write_text("1024")
    return path


def test_v1_dirs_are_announced_before_they_exist_and_taken_back_once_removed(
    tmp_path: Path,
) -> None:
    cpu, mem = v1_tree(tmp_path)
    ear = Ear()
    groups = Cgroups(delegation(tmp_path, V1_SELF), "sess", rmdir=fake_rmdir, watcher=ear)
    group = groups.create("r1", Shares.cpu_and_memory(64 * MIB))
    told = [(verb, path) for verb, path, _ in ear.heard]
    session_dirs = [cpu / "sprawl-orch" / "sess", mem / "sprawl-orch" / "sess"]
    assert told == [
        ("cgroup", session_dirs[0]),
        ("cgroup", group.dirs["cpu"]),
        ("cgroup", session_dirs[1]),
        ("cgroup", group.dirs["memory"]),
    ]
    assert not any(existed for _, _, existed in ear.heard), "told before mkdir"
    ear.heard.clear()
    assert groups.remove(group) is None
    assert sorted(p for _, p, _ in ear.heard) == sorted(group.dirs.values())
    assert all(verb == "cgroup-gone" and not existed for verb, _, existed in ear.heard)
    ear.heard.clear()
    assert groups.close() is None
    gone = {p for verb, p, _ in ear.heard if verb == "cgroup-gone"}
    assert set(session_dirs) <= gone
    assert not (cpu / "sprawl-orch").exists()


def test_a_refused_create_takes_back_what_it_announced(tmp_path: Path) -> None:
    cpu, mem = v1_tree(tmp_path)
    ear = Ear()
    groups = Cgroups(delegation(tmp_path, V1_SELF), "s", rmdir=fake_rmdir, watcher=ear)
    (mem / "sprawl-orch").write_text("")  # a file where the memory side's parent goes
    with pytest.raises(CgroupRefused):
        groups.create("r", Shares.cpu_and_memory(MIB))
    announced = {p for verb, p, _ in ear.heard if verb == "cgroup"}
    taken_back = {p for verb, p, _ in ear.heard if verb == "cgroup-gone"}
    assert announced and announced <= taken_back
    assert not (cpu / "sprawl-orch" / "s").exists()


def test_the_reaper_kills_the_members_and_removes_runs_then_the_session(
    tmp_path: Path,
) -> None:
    session = tmp_path / "memory" / "sprawl-orch" / "s"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        run_a = cgroup_dir(session / "run-a", f"{sleeper.pid}\n")
        run_b = cgroup_dir(session / "run-b")
        (session / "cgroup.procs").write_text("")
        watch = Watchlist()
        for path in (session, run_a, run_b):
            watch.apply(Cgroup(path))
        report = Reaper("s", [], 0.1, quiet, rmdir=fake_rmdir).reap(watch)
        assert sleeper.wait(5) == -9, "SIGKILLed as a member of the run's cgroup"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert report.cgroups == [str(run_a), str(run_b), str(session)], "deepest first"
    assert report.left == [] and report.problems == []
    assert not session.exists() and (tmp_path / "memory" / "sprawl-orch").exists()


def test_only_run_and_session_directories_are_touched(tmp_path: Path) -> None:
    project = cgroup_dir(tmp_path / "project")
    empty_stranger = tmp_path / "cpu" / "system.slice"
    empty_stranger.mkdir(parents=True)
    removed, left, problems = remove_cgroups({project, empty_stranger}, quiet, fake_rmdir)
    assert removed == [] and left == []
    assert len(problems) == 2 and all("left alone" in p for p in problems)
    assert project.exists() and empty_stranger.exists()
    assert is_ours(tmp_path / "run-x") and is_ours(tmp_path / "sprawl-orch" / "s")
    assert not is_ours(Path("run-x")) and not is_ours(tmp_path / "sprawl-orch")


def test_a_cgroup_that_will_not_go_is_reported_left_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sprawl_orch.guardian._cgroup_reap, "EMPTY_SECONDS", 0.2)
    run = cgroup_dir(tmp_path / "run-stuck")

    def busy(path: Path) -> None:
        raise OSError(errno.EBUSY, "Device or resource busy", str(path))

    removed, left, problems = remove_cgroups({run}, quiet, busy)
    assert removed == [] and left == [str(run)]
    assert problems == [f"{run}: Device or resource busy"]


def test_an_already_removed_cgroup_counts_as_removed(tmp_path: Path) -> None:
    gone = tmp_path / "sprawl-orch" / "s" / "run-a"
    removed, left, problems = remove_cgroups({gone}, quiet)
    assert removed == [str(gone)] and left == [] and problems == []
