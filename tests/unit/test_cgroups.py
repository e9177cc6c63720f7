"""cgroups.py against temporary directory trees shaped like /sys/fs/cgroup (v2 and v1).

A plain directory stands in for cgroupfs: interface files are ordinary files, and `rmdir`
is replaced by one that first deletes them (cgroupfs removes them itself).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.runs.cgroups import (
    NOT_DELEGATED_PHRASE,
    CgroupRefused,
    Cgroups,
    PlatformShares,
    Shares,
    delegation,
    platform_shares,
    safe_name,
)

MIB = 2**20


def fake_rmdir(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            if child.is_file():
                child.unlink()
    os.rmdir(path)


def v2_tree(root: Path, controllers: str = "cpu memory io pids") -> Path:
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    app = root / "user.slice" / "app"
    app.mkdir(parents=True)
    (app / "cgroup.procs").write_text("")
    (app / "cgroup.subtree_control").write_text("")
    (app / "cgroup.controllers").write_text(controllers + "\n")
    return app


V2_SELF = "0::/user.slice/app\n"
V1_SELF = "9:name=systemd:/\n4:memory:/jobs/me\n1:cpu,cpuacct:/\n0::/\n"


def v1_tree(root: Path, memory: bool = True) -> tuple[Path, Path]:
    cpu = root / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "cgroup.procs").write_text("")
    mem = root / "memory" / "jobs" / "me"
    if memory:
        mem.mkdir(parents=True)
        (mem / "cgroup.procs").write_text("")
    (root / "unified").mkdir()  # the hybrid's controller-less v2 mount: ignored
    return cpu, mem


def test_v2_delegated(tmp_path: Path) -> None:
    app = v2_tree(tmp_path)
    found = delegation(tmp_path, V2_SELF)
    assert found.shares is PlatformShares.CPU_AND_MEMORY
    assert found.version == "v2"
    assert found.parents == {"unified": app}
    assert platform_shares(tmp_path, V2_SELF) is PlatformShares.CPU_AND_MEMORY


def test_v2_cpu_only_when_memory_is_not_available(tmp_path: Path) -> None:
    v2_tree(tmp_path, controllers="cpu io")
    assert delegation(tmp_path, V2_SELF).shares is PlatformShares.CPU


def test_v2_not_delegated_says_so(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    (tmp_path / "user.slice" / "app" / "cgroup.subtree_control").unlink()
    found = delegation(tmp_path, V2_SELF)
    assert found.shares is PlatformShares.NONE
    assert NOT_DELEGATED_PHRASE in found.why
    assert "cgroup.subtree_control" in found.why


def test_nonexistent_root_is_not_delegated(tmp_path: Path) -> None:
    found = delegation(tmp_path / "nowhere", V1_SELF)
    assert found.shares is PlatformShares.NONE
    assert found.platform_has_cgroups


def test_not_linux_has_no_cgroups(tmp_path: Path) -> None:
    found = delegation(tmp_path, V2_SELF, platform="darwin")
    assert found.shares is PlatformShares.NONE and not found.platform_has_cgroups


def test_v2_adopt_moves_us_into_core_then_makes_runs(tmp_path: Path) -> None:
    app = v2_tree(tmp_path)
    groups = Cgroups(delegation(tmp_path, V2_SELF), "sess", pid=4242, rmdir=fake_rmdir)
    a = groups.create("a", Shares.cpu_and_memory(64 * MIB))
    assert (app / "core" / "cgroup.procs").read_text() == "4242\n"
    assert (app / "cgroup.subtree_control").read_text() == "+cpu +memory"
    run = app / "run-sess.a"
    assert a.dirs == {"unified": run}
    assert (run / "cpu.weight").read_text() == "100"
    assert (run / "memory.max").read_text() == str(64 * MIB)
    b = groups.create("b", Shares(kind="cpu"))
    # CPU only: a reused directory must not keep an old limit.
    assert (b.dirs["unified"] / "memory.max").read_text() == "max"
    assert (b.dirs["unified"] / "cpu.weight").read_text() == "100"
    assert b.relative == {"unified": "/user.slice/app/run-sess.b"}
    assert groups.remove(a) is None and not run.exists()
    assert groups.close() is None
    assert not b.dirs["unified"].exists()
    # `core` is where we live; it stays until we exit.
    assert (app / "core").is_dir()


def test_v2_already_in_core_uses_the_parent(tmp_path: Path) -> None:
    app = v2_tree(tmp_path)
    (app / "core").mkdir()
    found = delegation(tmp_path, "0::/user.slice/app/core\n")
    assert found.parents == {"unified": app}


def test_v2_joining_reads_oom_never_max(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    groups = Cgroups(delegation(tmp_path, V2_SELF), "s", pid=1, rmdir=fake_rmdir)
    group = groups.create("r", Shares.cpu_and_memory(8 * MIB))
    events = group.dirs["unified"] / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 17\noom 2\noom_kill 5\n")
    joining = group.joining()
    joining.join(777)
    assert joining.joined is True and joining.before == 2
    assert (group.dirs["unified"] / "cgroup.procs").read_text() == "777\n"
    assert group.pids() == {777}
    events.write_text("max 40\noom 2\n")
    assert group.oom_count() == 2
    events.unlink()
    assert group.oom_count() is None
    groups.close()


def test_v2_refused_leaves_nothing(tmp_path: Path) -> None:
    app = v2_tree(tmp_path)
    groups = Cgroups(delegation(tmp_path, V2_SELF), "s", pid=1, rmdir=fake_rmdir)
    (app / "cgroup.subtree_control").unlink()
    (app / "cgroup.subtree_control").mkdir()  # a write is refused (EISDIR)
    with pytest.raises(CgroupRefused, match=r"cgroup\.subtree_control"):
        groups.create("r", Shares(kind="cpu"))
    assert not list(app.glob("run-*"))
    # Adoption is tried once; later runs are refused with the same words.
    with pytest.raises(CgroupRefused, match=r"cgroup\.subtree_control"):
        groups.create("other", Shares(kind="cpu"))


def test_memory_limit_refused_when_only_cpu_is_delegated(tmp_path: Path) -> None:
    v2_tree(tmp_path, controllers="cpu")
    groups = Cgroups(delegation(tmp_path, V2_SELF), "s", pid=1, rmdir=fake_rmdir)
    with pytest.raises(CgroupRefused, match="memory controller"):
        groups.create("r", Shares.cpu_and_memory(MIB))


def test_v1_layout(tmp_path: Path) -> None:
    cpu, mem = v1_tree(tmp_path)
    found = delegation(tmp_path, V1_SELF)
    assert found.version == "v1" and found.shares is PlatformShares.CPU_AND_MEMORY
    assert found.parents == {"cpu": cpu, "memory": mem}
    groups = Cgroups(found, "sess", rmdir=fake_rmdir)
    group = groups.create("r1", Shares.cpu_and_memory(64 * MIB))
    run_mem = mem / "sprawl-orch" / "sess" / "run-r1"
    run_cpu = cpu / "sprawl-orch" / "sess" / "run-r1"
    assert group.dirs == {"cpu": run_cpu, "memory": run_mem}
    assert (run_mem / "memory.limit_in_bytes").read_text() == str(64 * MIB)
    assert (run_cpu / "cpu.shares").read_text() == "1024"
    assert group.relative == {
        "cpu": "/sprawl-orch/sess/run-r1",
        "memory": "/jobs/me/sprawl-orch/sess/run-r1",
    }
    (run_mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert group.oom_count() == 3
    joining = group.joining()
    joining.join(99)
    assert (run_mem / "cgroup.procs").read_text() == "99\n"
    assert (run_cpu / "cgroup.procs").read_text() == "99\n"
    assert joining.before == 3
    cpu_only = groups.create("r2", Shares(kind="cpu"))
    assert set(cpu_only.dirs) == {"cpu"} and cpu_only.oom_count() is None
    assert groups.close() is None
    assert not (cpu / "sprawl-orch").exists() and not (mem / "sprawl-orch").exists()


def test_v1_without_memory_hierarchy_gives_cpu(tmp_path: Path) -> None:
    v1_tree(tmp_path, memory=False)
    assert delegation(tmp_path, V1_SELF).shares is PlatformShares.CPU


def test_join_failure_is_said_and_not_raised(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    groups = Cgroups(delegation(tmp_path, V1_SELF), "s", rmdir=fake_rmdir)
    group = groups.create("r", Shares(kind="cpu"))
    fake_rmdir(group.dirs["cpu"])  # the cgroup vanished under us
    joining = group.joining()
    joining.join(5)
    assert joining.joined is False and "cgroup.procs" in joining.error
    groups.close()


def test_shares_values() -> None:
    assert Shares().kind == "unset"
    assert Shares.cpu_and_memory(5).limit_bytes == 5
    with pytest.raises(ValueError):
        Shares(kind="cpu", limit_bytes=5)
    with pytest.raises(ValueError):
        Shares(kind="cpu_and_memory")
    with pytest.raises(ValueError):
        Shares.cpu_and_memory(0)


@pytest.mark.parametrize("run", ["default", "a.b-c_d", "../etc", "with space", ".hidden", "x" * 80])
def test_safe_name_is_one_plain_component(run: str) -> None:
    name = safe_name(run)
    assert "/" not in name and not name.startswith(".") and 0 < len(name) <= 64
    assert safe_name(run) == name
    if run not in ("default", "a.b-c_d"):
        assert name != safe_name(run + "!")
