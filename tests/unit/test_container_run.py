"""ContainerArm/ContainerRun flow over a fake backend: what is recorded, what is removed,
what is refused, what the guardian hears. (Real engines: tests/integration.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.config import ContainerConfig, EngineImages
from sprawl_orch.container.admission import clear_cache
from sprawl_orch.container.argv import HostLimits
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.container.ownership import own_copy
from sprawl_orch.container.run import never_ran_code
from sprawl_orch.core.arms import container_assurances
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.guardian.protocol import (
    Announcement,
    Created,
    Expect,
    Gone,
    Scratch,
    ScratchGone,
)
from sprawl_orch.runs.launch import Launch, Watcher
from tests.unit.container_fake import FakeEngine, facts

IMAGE = "sha256:" + "ef" * 32
HOST = HostLimits({"nofile": 20000, "nproc": 96365}, cpus=2, memory_bytes=24 * 1024**3)
ME = f"{os.getuid()}:{os.getgid()}"
CONFIG = ContainerConfig(images=EngineImages(docker=IMAGE), user=ME)


class Ear(Watcher):
    def __init__(self) -> None:
        self.heard: list[tuple[str, ...]] = []

    def tell(self, message: Announcement) -> None:
        match message:
            case Expect(name) | Gone(name):
                self.heard.append((type(message).__name__.lower(), name))
            case Created(name, container_id):
                self.heard.append(("created", name, container_id))
            case Scratch() | ScratchGone():
                return
            case _:
                raise AssertionError(f"a container arm has no host group or cgroup: {message}")


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def launch(tmp_path: Path) -> Launch:
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "a.txt").write_text("a")
    return Launch(
        argv=("ls", "-l"),
        cwd=copy,
        env={"LANG": "C.UTF-8", "PATH": "/bin"},
        outputs=tmp_path / "out",
        tag="s9-1",
        session="s9",
        run="r1",
        watcher=Ear(),
    )


def arm_with(engine: FakeEngine) -> ContainerArm:
    return ContainerArm(CONFIG, engine, host=HOST)  # type: ignore[arg-type]


def test_a_run_records_argv_removes_and_tells_the_guardian(launch: Launch) -> None:
    engine = FakeEngine(images=[IMAGE])
    arm = arm_with(engine)
    arm.prepare(launch.cwd)  # the probe runs `true`, which exits 0
    engine.exit_code = 3
    running = arm.start(launch)
    assert running.wait(1.0)
    done = running.finish()
    assert (done.exit_code, done.killed, done.oom_killed) == (3, False, False)
    assert done.stdout_path == launch.outputs / "stdout"
    assert done.stdout_path.read_text() == "out\n"
    record = done.extra["container"]
    assert isinstance(record, dict)
    assert record["verified"] is True and record["removed"] is True
    assert record["argv"][:2] == ["/usr/bin/docker", "create"]
    assert record["argv"][-3:] == [IMAGE, "ls", "-l"]
    assert "C.UTF-8" not in " ".join(record["argv"])
    assert (record["engine"], record["image"], record["runtime"]) == ("docker", IMAGE, "runc")
    heard = launch.watcher.heard  # type: ignore[attr-defined]
    assert heard == [
        ("expect", "sprawl-s9-1"),
        ("created", "sprawl-s9-1", record["id"]),
        ("gone", "sprawl-s9-1"),
    ]
    assert running.finish() is done  # collected once


def test_a_shell_line_runs_under_the_images_sh(launch: Launch) -> None:
    engine = FakeEngine(images=[IMAGE])
    line = Launch(
        argv=("/usr/bin/bash", "-c", "echo $HOME"),
        cwd=launch.cwd,
        env={},
        outputs=launch.outputs,
        tag="s9-2",
        session="s9",
        shell_line="echo $HOME",
    )
    arm_with(engine).start(line).finish()
    create = [c[1] for c in engine.calls if c[0] == "create"][-1]  # after the probe's
    assert create[-3:] == ("/bin/sh", "-c", "echo $HOME")  # type: ignore[index]


def test_a_removal_that_fails_is_reported(launch: Launch) -> None:
    engine = FakeEngine(images=[IMAGE])
    running = arm_with(engine).start(launch)
    engine.remove_error = "device or resource busy"
    done = running.finish()
    record = done.extra["container"]
    assert record["removed"] is False  # type: ignore[index]
    assert "device or resource busy" in record["removal_error"]  # type: ignore[index]
    assert ("gone", "sprawl-s9-1") not in launch.watcher.heard  # type: ignore[attr-defined]


def test_a_mismatch_removes_before_start_and_refuses(launch: Launch) -> None:
    engine = FakeEngine(images=[IMAGE])
    arm = arm_with(engine)
    arm.prepare(launch.cwd)  # admitted with an honest create
    engine.alter = lambda d: d["HostConfig"].update(NetworkMode="host")
    with pytest.raises(SprawlError) as err:
        arm.start(launch)
    assert (err.value.code, err.value.subject) == (ErrorCode.SANDBOX_DENIED, "network_mode")
    assert "expected 'none', found 'host'" in err.value.detail
    assert engine.containers == {}
    assert [c for c in engine.calls if c[0] == "start"] == [("start", "c1")]  # the probe only


def test_a_program_missing_in_the_image_is_refused_like_on_the_host(launch: Launch) -> None:
    engine = FakeEngine(images=[IMAGE])
    arm = arm_with(engine)
    arm.prepare(launch.cwd)
    engine.start_error = (
        "failed to create shim task: OCI runtime create failed: runc create "
        'failed: unable to start container process: exec: "ls": executable '
        "file not found in $PATH: unknown"
    )
    with pytest.raises(SprawlError) as err:
        arm.start(launch)
    assert (err.value.code, err.value.subject) == (ErrorCode.TOOL_UNAVAILABLE, "ls")
    assert err.value.recovery.startswith("check the program name")
    assert err.value.recovery.endswith("or use the shell arm (--shell)")
    assert engine.containers == {}


def test_never_ran_exit_codes_follow_podman_run() -> None:
    assert never_ran_code(128, "anything", 125) == 128  # docker sets its own
    assert never_ran_code(0, 'exec: "x": executable file not found in $PATH', 125) == 127
    assert never_ran_code(0, "exec /work/x: permission denied", 125) == 126
    assert never_ran_code(0, "crun: something", 125) == 125


def test_kill_is_recorded(launch: Launch) -> None:
    engine = FakeEngine(images=[IMAGE])
    running = arm_with(engine).start(launch)
    running.kill()
    done = running.finish()
    assert done.killed and done.exit_code == 137
    assert ("kill", "c2") in engine.calls


def test_refused_admission_refuses_prepare_and_start(launch: Launch) -> None:
    arm = arm_with(FakeEngine(images=[]))
    with pytest.raises(SprawlError) as err:
        arm.prepare(launch.cwd)
    assert err.value.code is ErrorCode.TOOL_UNAVAILABLE
    with pytest.raises(SprawlError):
        arm.start(launch)
    assert arm.note() is None


ROOTLESS_MAP = ((0, 1500, 1), (1, 1_400_000_000, 65536))


@pytest.mark.parametrize(
    ("changes", "kept"),
    [
        ({}, False),
        ({"rootless": True, "uid_map": ROOTLESS_MAP, "gid_map": ROOTLESS_MAP}, True),
        ({"rootless": True}, False),  # rootless but no map listed: nothing to claim from
    ],
)
def test_user_axis_follows_the_engine(changes: dict[str, object], kept: bool) -> None:
    arm = arm_with(FakeEngine(facts(**changes), [IMAGE]))
    assert arm.assurances() == container_assurances(kept)
    note = arm.note()
    assert note is not None and note.startswith(f"User axis {'kept' if kept else 'not kept'}: ")


def test_own_copy_gives_the_tree_to_the_user_without_following_links(tmp_path: Path) -> None:
    root = tmp_path / "copy"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f").write_text("x")
    outside = tmp_path / "outside"
    outside.write_text("not ours")
    (root / "link").symlink_to(outside)
    before = outside.stat()
    if os.geteuid() == 0:
        assert own_copy(root, 65534, 65534) == 5
        assert {p.lstat().st_uid for p in [root, *root.rglob("*")]} == {65534}
        assert own_copy(root, 65534, 65534) == 0  # a resync touches only what changed
    else:
        with pytest.raises(SprawlError) as err:
            own_copy(root, 65534, 65534)
        assert err.value.code is ErrorCode.SANDBOX_DENIED
        assert own_copy(root, os.getuid(), os.getgid()) >= 0
    after = outside.stat()
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
