"""Five-axis conformance of the container arm's user-namespace rows (issue #14), with the
user axis proved from the host three ways (tests/integration/conformance_user.py):

- the owner of a file the command created (design §15), read while the command runs,
- the ids in /proc/<pid>/status of the command's real process while it runs,
- a 0600 file of ours, planted in the mounted copy right before start, is unreadable.

The user axis is observed kept only when all three say so. Rows: podman --userns=auto
(rootful), docker userns-remap (the second private dockerd), and the plain docker daemon
as the control (claims no, and the process probe shows the host's `nobody`).
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.container.admission import admit, clear_cache
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.core.arms import container_assurances
from sprawl_orch.core.assurances import Guarantee, Kept
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.engine import Attached, ContainerEngine
from tests.integration.conformance import (
    MiB,
    Observed,
    assert_conformance,
    observe_filesystem,
    observe_network,
    observe_process_tree,
    observe_resources,
    table,
)
from tests.integration.conformance_dialects import ShDialect
from tests.integration.conformance_user import (
    SECRET,
    observe_owner_live,
    observe_private_read,
    observe_user_process,
    sh_sleeper,
    write_secret,
)
from tests.integration.container_support import config_for, make_engine
from tests.integration.test_conformance_container import ContainerRunner

LIMIT = 64 * MiB


@pytest.fixture(autouse=True)
def fresh_admissions() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


class Planting:
    """A real engine that, when asked, writes a 0600 file of ours into the copy right
    before the next start (after the arm gave the copy to the container's uid)."""

    def __init__(self, real: ContainerEngine) -> None:
        self._real = real
        self.name = real.name
        self.pending: list[Path] = []

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._real, attr)

    def create(self, argv: Sequence[str]) -> str:
        return self._real.create(argv)

    def start(self, container: str, stdout: Path, stderr: Path, given: object = None) -> Attached:
        while self.pending:
            secret = self.pending.pop()
            if os.geteuid() == 0:
                write_secret(secret)
            else:
                # a rootless caller no longer owns its copy now: it writes there inside
                # podman's namespace, as container root, which is the caller on the host
                self._real.unshare(
                    [
                        "sh",
                        "-c",
                        f"umask 077; printf %s {shlex.quote(SECRET)} > {shlex.quote(str(secret))}",
                    ]
                )  # type: ignore[attr-defined]
                assert secret.stat().st_uid == os.getuid(), "the planted file is not ours"
        return self._real.start(container, stdout, stderr)


def combine(*seen: Observed) -> Observed:
    """Kept only when every probe says kept."""
    broken = [o for o in seen if o.kept is Kept.NO]
    evidence = " | ".join(o.evidence for o in seen)
    return Observed(Guarantee.USER, Kept.NO if broken else Kept.YES, evidence)


def conformance(
    tmp_path: Path, label: str, engine: ContainerEngine, image: str, **settings: object
) -> tuple[ContainerArm, dict[Guarantee, Observed]]:
    config = config_for(engine.name, image, memory_bytes=LIMIT, **settings)
    planting = Planting(engine)
    arm = ContainerArm(config, planting)  # type: ignore[arg-type]
    admission = arm.admission()
    assert admission.admitted, admission.reason
    source = tmp_path / "source"
    source.mkdir()
    (source / "README").write_text("the person's tree\n")
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    arm.prepare(source)
    # the copy is mounted at the source's own path, as the exec tool does (design §5)
    run = ContainerRunner(arm, copy, tmp_path / "outputs", source)
    sh = ShDialect()

    def plant(secret: Path) -> str:
        planting.pending.append(secret)
        return secret.name  # the command's cwd is the mounted copy

    user = combine(
        observe_owner_live(run, copy),
        observe_user_process(run, sh_sleeper),
        observe_private_read(run, plant, copy),
    )
    observed = {
        Guarantee.FILESYSTEM: observe_filesystem(run, sh, source, lambda: copy),
        Guarantee.NETWORK: observe_network(run, sh),
        Guarantee.PROCESS_TREE: observe_process_tree(run, sh, copy),
        Guarantee.USER: user,
        Guarantee.RESOURCES: observe_resources(run, sh, LIMIT),
    }
    print("\n" + table(label, observed) + f"\n  user: {user.evidence}")
    assert sorted(p.name for p in source.iterdir()) == ["README"]
    assert all(r["verified"] is True and r["removed"] is True for r in run.records)
    return arm, observed


def test_podman_userns_conformance(tmp_path: Path, podman_image: str) -> None:
    arm, observed = conformance(
        tmp_path, "container (podman --userns=auto)", make_engine("podman"), podman_image
    )
    assert arm.admission().userns is not None
    assert_conformance(arm.assurances(), observed)
    assert arm.assurances() == container_assurances(True)  # all five axes


def test_docker_userns_remap_conformance(
    tmp_path: Path, docker_userns: tuple[dict[str, str], str]
) -> None:
    env, image = docker_userns
    arm, observed = conformance(
        tmp_path, "container (docker userns-remap)", DockerEngine(environ=env), image
    )
    admission = arm.admission()
    assert admission.userns is not None and admission.userns.mode == "docker-remap"
    assert_conformance(arm.assurances(), observed)
    assert arm.assurances() == container_assurances(True)


def test_plain_docker_is_the_control(tmp_path: Path, docker_image: str) -> None:
    engine = make_engine("docker")
    if admit(engine, config_for("docker", docker_image)).uids_namespaced:
        pytest.skip("DOCKER_HOST points at a remapping daemon")
    arm, observed = conformance(tmp_path, "container (docker, plain)", engine, docker_image)
    assert_conformance(arm.assurances(), observed)
    assert observed[Guarantee.USER].kept is Kept.NO
    assert "nobody" in observed[Guarantee.USER].evidence
    assert "userns-remap" in (arm.note() or "")
