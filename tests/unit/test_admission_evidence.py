"""Admission evidence kept on disk (container/evidence.py) and the probe's announcements,
over the fake backend: reused while the engine's identity holds, dropped and proved again
when it changes or a real command fails at the engine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.config import ContainerConfig, EngineImages
from sprawl_orch.container.admission import admit, clear_cache
from sprawl_orch.container.argv import HostLimits
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.container.evidence import Evidence
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
from tests.unit.container_fake import FakeEngine

IMAGE = "sha256:" + "ab" * 32
HOST = HostLimits({"nofile": 20000, "nproc": 96365}, cpus=2, memory_bytes=24 * 1024**3)
ME = f"{os.getuid()}:{os.getgid()}"
CONFIG = ContainerConfig(images=EngineImages(docker=IMAGE), user=ME)


class Ear(Watcher):
    """Records every announcement, and whether the path/container existed when told."""

    def __init__(self, engine: FakeEngine | None = None) -> None:
        self.heard: list[tuple[str, str, bool]] = []
        self.engine = engine

    def tell(self, message: Announcement) -> None:
        match message:
            case Expect(name):
                made = self.engine is not None and self.engine.created > 0
                self.heard.append(("expect", name, made))
            case Created(name, _):
                self.heard.append(("created", name, True))
            case Gone(name):
                self.heard.append(("gone", name, False))
            case Scratch(path):
                self.heard.append(("scratch", str(path), path.exists()))
            case ScratchGone(path):
                self.heard.append(("scratch_gone", str(path), path.exists()))
            case _:
                raise AssertionError(f"no process groups or cgroups here: {message}")


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def fake(images: list[str] | None = None) -> FakeEngine:
    """One daemon seen by several processes: the same endpoint every time."""
    engine = FakeEngine(images=[IMAGE] if images is None else images)
    engine.endpoint_ = "fake"
    return engine


def creates(engine: FakeEngine) -> int:
    return sum(1 for c in engine.calls if c[0] == "create")


def test_a_passed_admission_is_reused_from_disk_by_the_next_process(tmp_path: Path) -> None:
    evidence = Evidence(tmp_path / "admission")
    engine = fake()
    first = admit(engine, CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    assert first.admitted and first.proved_at is None and creates(engine) == 1
    kept = list((tmp_path / "admission").glob("docker-*.json"))
    assert len(kept) == 1 and oct(kept[0].stat().st_mode & 0o777) == "0o600"
    clear_cache()  # a new process
    again = fake()
    second = admit(again, CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    assert second.admitted and second.proved_at is not None
    assert creates(again) == 0, "kept evidence must skip the probe container"
    assert ("facts", None) not in again.calls
    assert (second.facts, second.image, second.runtime_used, second.userns_why) == (
        first.facts,
        first.image,
        first.runtime_used,
        first.userns_why,
    )
    assert evidence.reused == 1


@pytest.mark.parametrize("change", ["identity", "config", "host"])
def test_another_identity_config_or_host_admits_again(tmp_path: Path, change: str) -> None:
    evidence = Evidence(tmp_path / "admission")
    admit(fake(), CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    clear_cache()
    engine, config, host = fake(), CONFIG, HOST
    if change == "identity":
        engine.identity_ = {"daemon": "fake-2"}  # another daemon (or its facts changed)
    elif change == "config":
        config = ContainerConfig(images=EngineImages(docker=IMAGE), user=ME, pids=64)
    else:
        host = HostLimits({"nofile": 1024, "nproc": 96365}, cpus=2, memory_bytes=24 * 1024**3)
    admission = admit(engine, config, host, evidence=evidence)  # type: ignore[arg-type]
    assert admission.admitted and admission.proved_at is None and creates(engine) == 1


def test_refusals_are_never_kept(tmp_path: Path) -> None:
    evidence = Evidence(tmp_path / "admission")
    engine = fake([])  # the image is not local
    assert not admit(engine, CONFIG, HOST, evidence=evidence).admitted  # type: ignore[arg-type]
    assert not (tmp_path / "admission").exists() or not list((tmp_path / "admission").iterdir())


def test_an_engine_that_cannot_be_asked_is_admitted_afresh_and_refused(tmp_path: Path) -> None:
    evidence = Evidence(tmp_path / "admission")
    admit(fake(), CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    clear_cache()
    down = fake()
    down.facts_error = SprawlError(
        ErrorCode.ENGINE_REFUSED, "docker info", "Cannot connect to the Docker daemon", "start it"
    )
    admission = admit(down, CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    assert not admission.admitted and "not running" in admission.reason


def test_a_corrupt_evidence_file_is_ignored(tmp_path: Path) -> None:
    evidence = Evidence(tmp_path / "admission")
    admit(fake(), CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    clear_cache()
    for kept in (tmp_path / "admission").glob("*.json"):
        kept.write_text('{"identity": ')
    engine = fake()
    assert admit(engine, CONFIG, HOST, evidence=evidence).admitted  # type: ignore[arg-type]
    assert creates(engine) == 1


def test_the_probe_is_announced_before_it_exists_and_taken_back(tmp_path: Path) -> None:
    engine = fake()
    ear = Ear(engine)
    assert admit(engine, CONFIG, HOST, watcher=ear).admitted  # type: ignore[arg-type]
    verbs = [h[0] for h in ear.heard]
    assert verbs == ["scratch", "expect", "created", "gone", "scratch_gone"], ear.heard
    scratch, expect = ear.heard[0], ear.heard[1]
    assert Path(scratch[1]).name.startswith("sprawl-probe-")
    assert scratch[2] is False, "the probe directory existed before the guardian heard of it"
    assert expect[2] is False, "the probe container was created before the guardian heard"
    assert ear.heard[-1] == ("scratch_gone", scratch[1], False)
    assert ear.heard[2][1] == expect[1] == ear.heard[3][1]


def launch_in(tmp_path: Path, ear: Ear) -> Launch:
    copy = tmp_path / "copy"
    copy.mkdir()
    return Launch(
        argv=("true",),
        cwd=copy,
        env={"PATH": "/bin"},
        outputs=tmp_path / "out",
        tag="s1-1",
        session="s1",
        watcher=ear,
    )


def test_an_engine_error_under_kept_evidence_drops_it_and_admits_again_once(
    tmp_path: Path,
) -> None:
    evidence = Evidence(tmp_path / "admission")
    admit(fake(), CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    clear_cache()
    engine = fake()
    engine.create_error = "OCI runtime create failed: unknown"
    arm = ContainerArm(CONFIG, engine, host=HOST, evidence=evidence)  # type: ignore[arg-type]
    assert arm.admission().proved_at is not None
    with pytest.raises(SprawlError) as err:
        arm.start(launch_in(tmp_path, Ear()))
    # the re-admission's own probe hit the same failure: refused, nothing kept
    assert creates(engine) == 2  # the command, then the fresh probe; no second try
    assert err.value.code is ErrorCode.SANDBOX_DENIED and "OCI runtime" in err.value.detail
    assert not list((tmp_path / "admission").glob("*.json"))
    assert arm.readmitted and not arm.admission().admitted


def test_a_transient_engine_error_is_proved_again_and_the_command_retried(
    tmp_path: Path,
) -> None:
    evidence = Evidence(tmp_path / "admission")
    admit(fake(), CONFIG, HOST, evidence=evidence)  # type: ignore[arg-type]
    clear_cache()
    engine = fake()
    engine.create_error = "transient"
    original = engine.create

    def once(argv: object) -> str:
        engine.create = original  # type: ignore[method-assign]
        try:
            return original(argv)  # type: ignore[arg-type]
        finally:
            engine.create_error = None

    engine.create = once  # type: ignore[method-assign]
    arm = ContainerArm(CONFIG, engine, host=HOST, evidence=evidence)  # type: ignore[arg-type]
    running = arm.start(launch_in(tmp_path, Ear()))
    assert running.wait(1) and arm.readmitted
    assert arm.admission().proved_at is None  # proved now, and kept again
    assert len(list((tmp_path / "admission").glob("*.json"))) == 1
    running.finish()


def test_a_failure_after_a_fresh_probe_is_not_retried(tmp_path: Path) -> None:
    engine = fake()
    arm = ContainerArm(
        CONFIG,
        engine,
        host=HOST,  # type: ignore[arg-type]
        evidence=Evidence(tmp_path / "admission"),
    )
    assert arm.admission().admitted
    engine.create_error = "boom"
    with pytest.raises(SprawlError):
        arm.start(launch_in(tmp_path, Ear()))
    assert not arm.readmitted and creates(engine) == 2


def test_podman_identity_follows_its_config_store_and_binaries(tmp_path: Path) -> None:
    from sprawl_orch.engines.podman import PodmanEngine

    conf = tmp_path / "storage.conf"
    store = tmp_path / "store"
    store.mkdir()
    conf.write_text(f'[storage]\ngraphroot = "{store}"\n')
    binary = tmp_path / "podman"
    binary.write_text("#!/bin/sh\n")
    env = {"CONTAINERS_STORAGE_CONF": str(conf), "PATH": str(tmp_path), "HOME": str(tmp_path)}
    engine = PodmanEngine(cli=str(binary), environ=env)
    first = engine.identity()
    assert first["store"][0] == str(store) and first == engine.identity()
    store.rename(tmp_path / "old-store")
    store.mkdir()  # `podman system reset` or another store: another directory
    second = engine.identity()
    assert second != first
    binary.write_text("#!/bin/sh\n# another version\n")
    assert engine.identity() != second
