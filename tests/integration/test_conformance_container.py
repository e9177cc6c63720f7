"""Five-axis conformance (design §15) of the container arm, per engine, by real commands in a
busybox image: the claimed `Assurances` must equal what is observed on every axis.

Four axes use the shared probes (tests/integration/conformance.py, busybox sh dialect).
The user axis uses the shared judge_uid (design §1's full rule): a rootful container's
uid 65534 is neither ours nor root's and yet is not a principal of its own: it is the
host's `nobody`. Observed kept = the owner uid of a file the command created, read from
the host, is not ours, not root, not a host account, and lies in a subordinate range
(/etc/subuid) — the mark of a rootless engine, podman --userns=auto or userns-remap.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from sprawl_orch.container.admission import admit, clear_cache
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.container.gvisor import runsc_path
from sprawl_orch.core.arms import container_assurances
from sprawl_orch.core.assurances import Guarantee
from sprawl_orch.runs.launch import Launch
from tests.integration.conformance import (
    MiB,
    Observed,
    ProbeBroken,
    Ran,
    Runner,
    assert_conformance,
    judge_uid,
    observe_filesystem,
    observe_network,
    observe_process_tree,
    observe_resources,
    table,
)
from tests.integration.conformance_dialects import ShDialect
from tests.integration.conftest import missing
from tests.integration.container_support import config_for, make_engine

LIMIT = 64 * MiB


@pytest.fixture(autouse=True)
def fresh_admissions() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def observe_user_spec(run: Runner, copy: Path) -> Observed:
    name = f"conformance-user-{secrets.token_hex(6)}"
    ran = run(["touch", name])
    if ran.exit_code != 0 or not (copy / name).exists():
        raise ProbeBroken(f"the create probe failed: {ran.said()}")
    return judge_uid((copy / name).stat().st_uid)


class ContainerRunner:
    """Commands through ContainerArm, each in the same copy; records what it created."""

    def __init__(self, arm: ContainerArm, copy: Path, outputs: Path, workdir: Path) -> None:
        self.arm, self.copy, self.outputs, self.workdir = arm, copy, outputs, workdir
        self.session = f"conf{secrets.token_hex(4)}"
        self.n = 0
        self.records: list[dict[str, object]] = []

    def __call__(self, argv: Sequence[str]) -> Ran:
        self.n += 1
        launch = Launch(
            argv=tuple(argv),
            cwd=self.copy,
            env={"PATH": "/bin"},
            outputs=self.outputs / str(self.n),
            tag=f"{self.session}-{self.n}",
            session=self.session,
            run="conformance",
            workdir=self.workdir,
        )
        running = self.arm.start(launch)
        if not running.wait(60):
            running.kill()
        done = running.finish()
        self.records.append(dict(done.extra["container"]))  # type: ignore[call-overload]
        return Ran(
            done.exit_code,
            done.stdout_path.read_text(errors="replace"),
            done.stderr_path.read_text(errors="replace"),
        )


def test_container_conformance(tmp_path: Path, engine_image: tuple[str, str]) -> None:
    conformance(tmp_path, engine_image, None)


def test_container_conformance_on_gvisor(tmp_path: Path, engine_image: tuple[str, str]) -> None:
    """The same five axes with runtime = "runsc" (issue 17): every command on gVisor."""
    if runsc_path() is None:
        missing("runsc is not installed (apt-get install runsc; .ci/setup-engines does)")
    conformance(tmp_path, engine_image, "runsc")


def conformance(tmp_path: Path, engine_image: tuple[str, str], runtime: str | None) -> None:
    name, image = engine_image
    engine = make_engine(name)
    config = config_for(name, image, memory_bytes=LIMIT, runtime=runtime)
    admission = admit(engine, config)
    assert admission.admitted, admission.reason
    assert admission.gvisor is (runtime == "runsc")
    arm = ContainerArm(config, engine)
    source = tmp_path / "source"
    source.mkdir()
    (source / "README").write_text("the person's tree\n")
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)  # the exec tool's sync, done by hand for the arm alone
    arm.prepare(source)
    # The copy is mounted at the source's own path, as the exec tool does (design §5).
    run = ContainerRunner(arm, copy, tmp_path / "outputs", source)
    sh = ShDialect()
    observed = {
        Guarantee.FILESYSTEM: observe_filesystem(run, sh, source, lambda: copy),
        Guarantee.NETWORK: observe_network(run, sh),
        Guarantee.PROCESS_TREE: observe_process_tree(run, sh, copy),
        Guarantee.USER: observe_user_spec(run, copy),
        Guarantee.RESOURCES: observe_resources(run, sh, LIMIT),
    }
    print(table(f"container ({name}{', runsc' if runtime else ''})", observed))
    claimed = arm.assurances()
    assert claimed == container_assurances(admission.uids_namespaced)
    assert_conformance(claimed, observed)
    # the source tree was never touched, every container was verified and removed
    assert sorted(p.name for p in source.iterdir()) == ["README"]
    assert all(r["verified"] is True and r["removed"] is True for r in run.records)
    assert len(run.records) == 6  # the filesystem probe writes twice (relative, by path)
