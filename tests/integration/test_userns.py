"""User namespaces on real engines (issue #14): podman --userns=auto, and what happens
when the map is not in force. Every container is checked gone by its session label."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.container.admission import admit, clear_cache
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.container.userns import PODMAN_AUTO, host_owner, principal_problem, subordinate
from sprawl_orch.core.assurances import Assurances, Guarantee
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing
from tests.integration.container_support import Case, config_for, make_engine, run


@pytest.fixture(autouse=True)
def fresh_admissions() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    c = Case(tmp_path, "podman")
    yield c
    assert c.leftovers() == [], "a container of this test was left behind"


def containers_range() -> list[range]:
    found = subordinate("containers", Path("/etc/subuid"))
    if not found:
        missing("no 'containers' range in /etc/subuid (run .ci/setup-engines)")
    return found


def test_podman_auto_gives_each_copy_uids_of_its_own(case: Case, podman_image: str) -> None:
    reserved = containers_range()
    config = config_for("podman", podman_image)
    arm = ContainerArm(config, make_engine("podman"))
    admission = arm.admission()
    assert admission.admitted and admission.uids_namespaced, admission.userns_why
    assert admission.userns is not None and admission.userns.flag == PODMAN_AUTO
    assert arm.assurances() == Assurances.of(*Guarantee)
    other = case.copy.parent / "other-copy"
    other.mkdir()
    # three commands at once: two in one copy (one principal: the copy's), one in
    # another copy (a principal of its own)
    first = arm.start(case.launch(shell="touch one; sleep 2"))
    time.sleep(0.5)
    second = arm.start(case.launch(shell="touch two; sleep 1"))
    third = arm.start(replace(case.launch(shell="touch three; sleep 1"), cwd=other))
    assert first.wait(60) and second.wait(60) and third.wait(60)
    done = [first.finish(), second.finish(), third.finish()]
    assert [d.exit_code for d in done] == [0, 0, 0], [d.stderr_path.read_text() for d in done]
    one, two = ((case.copy / n).stat().st_uid for n in ("one", "two"))
    three = (other / "three").stat().st_uid
    assert one == two, "a second command took the copy away from the first"
    assert three != one, f"two copies ran as the same host uid {one}"
    for uid in (one, three):
        assert any(uid in r for r in reserved), f"{uid} is outside {reserved}"
        assert principal_problem(uid) is None
    records: list[Mapping[str, Any]] = [d.extra["container"] for d in done]  # type: ignore[misc]
    assert all(r["userns"] == "podman-auto" for r in records)
    assert "--userns" in records[0]["argv"] and "--uidmap" in records[1]["argv"]
    assert [int(str(r["host_owner"]).split(":")[0]) for r in records] == [one, one, three]


class DroppingUserns:
    """A real engine whose create silently loses `--userns` (the engine or a wrapper
    ignoring the flag): verification must refuse before anything runs."""

    def __init__(self, real: ContainerEngine) -> None:
        self._real = real
        self.name = real.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._real, attr)

    def create(self, argv: Sequence[str]) -> str:
        out = list(argv)
        at = out.index("--userns")
        del out[at : at + 2]
        return self._real.create(out)


def test_a_container_without_the_map_is_refused(case: Case, podman_image: str) -> None:
    containers_range()
    config = config_for("podman", podman_image)
    real = make_engine("podman")
    admission = admit(real, config)
    assert admission.uids_namespaced
    arm = ContainerArm(config, DroppingUserns(real))  # type: ignore[arg-type]
    arm._admission = admission
    with pytest.raises(SprawlError) as err:
        arm.start(case.launch(["touch", "ran"]))
    assert err.value.code is ErrorCode.SANDBOX_DENIED and err.value.subject == "userns"
    assert "HostConfig.IDMappings" in err.value.detail
    assert not (case.copy / "ran").exists(), "the unverified container started"
    gone = subprocess.run(
        ["podman", "inspect", f"sprawl-{case.session}-1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert gone.returncode != 0, "the refused container was not removed"


def test_userns_off_runs_as_the_hosts_nobody_and_says_so(case: Case, podman_image: str) -> None:
    config = config_for("podman", podman_image, userns="off")
    arm = ContainerArm(config, make_engine("podman"))
    admission = arm.admission()
    assert admission.admitted and not admission.uids_namespaced
    assert 'userns = "off"' in admission.userns_why
    assert arm.assurances().user.value == "no"
    done = run(arm, case.launch(["touch", "plain"]))
    assert done.exit_code == 0
    assert (case.copy / "plain").stat().st_uid == 65534  # the host's nobody: not claimed
    record: Mapping[str, Any] = done.extra["container"]  # type: ignore[assignment]
    assert "--userns" not in record["argv"]


def test_required_refuses_an_engine_without_one(docker_image: str) -> None:
    engine = make_engine("docker")
    plain = admit(engine, config_for("docker", docker_image))
    if plain.uids_namespaced:
        pytest.skip("DOCKER_HOST points at a remapping daemon; the plain one is tested here")
    refused = admit(engine, config_for("docker", docker_image, userns="required"))
    assert not refused.admitted and refused.code is ErrorCode.SANDBOX_DENIED
    assert 'userns = "required"' in refused.reason and "userns-remap" in refused.reason


def test_host_owner_matches_the_inspected_map(case: Case, podman_image: str) -> None:
    """The owner computed from inspect is the owner the kernel gives the command's files."""
    config = config_for("podman", podman_image)
    engine = make_engine("podman")
    admission = admit(engine, config)
    assert admission.userns is not None
    arm = ContainerArm(config, engine)
    running = arm.start(case.launch(shell="touch mine; sleep 1"))
    inspect = engine.inspect(running.container)
    assert running.wait(60)
    running.finish()
    deadline = time.monotonic() + 5
    while not (case.copy / "mine").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    st = (case.copy / "mine").stat()
    assert (st.st_uid, st.st_gid) == host_owner(admission.userns, 65534, 65534, inspect)


class CountingRm:
    """The real podman engine, counting every `podman rm` it runs and its exit status."""

    def __init__(self, real: ContainerEngine) -> None:
        self._real = real
        self.rm: list[int] = []
        original = real._run  # type: ignore[attr-defined]

        def counted(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
            done: subprocess.CompletedProcess[str] = original(*args, check=check)
            if args and args[0] == "rm":
                self.rm.append(done.returncode)
            return done

        real._run = counted  # type: ignore[attr-defined]


def test_podman_auto_removal_needs_no_retry(case: Case, podman_image: str) -> None:
    """podman 4.3 leaves userdata/shm mounted after a --userns=auto container exits and its
    `rm` then races its own unmount (EBUSY, ~1 rm in 3 under load): the engine unmounts shm
    first, so every removal succeeds at once and no shm mount of ours is left."""
    containers_range()
    engine = make_engine("podman")
    counting = CountingRm(engine)
    arm = ContainerArm(config_for("podman", podman_image), engine)
    assert arm.admission().userns is not None
    ids = []
    for _ in range(8):
        done = run(arm, case.launch(["true"]))
        record: Mapping[str, Any] = done.extra["container"]  # type: ignore[assignment]
        assert done.exit_code == 0 and record["removed"], record
        ids.append(str(record["id"]))
    # (admission's probe container is removed through the same engine: one rm more)
    assert len(counting.rm) >= 8 and set(counting.rm) == {0}, (
        f"rm exit statuses {counting.rm}: a removal failed and was retried"
    )
    mounts = Path("/proc/self/mountinfo").read_text()
    assert not [i for i in ids if i in mounts], "a container's shm is still mounted"


def test_docker_host_key_reaches_the_remapped_daemon(
    docker_userns: tuple[dict[str, str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[sandbox.container] docker_host names the --userns-remap dockerd: admission, the run
    and the guardian reach it although $DOCKER_HOST names a socket that does not exist."""
    env, image = docker_userns
    host = env["DOCKER_HOST"]
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("x\n")
    config = parse_config(
        {
            "sandbox": {
                "arm": "container",
                "scratch_dir": str(tmp_path),
                "container": {
                    "engine": "docker",
                    "docker_host": host,
                    "userns": "required",
                    "images": {"docker": image},
                },
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    with ExecTool(config, tree, record=False) as tool:
        result = tool.exec(["id", "-u"]).as_json_dict()
        assert tool.guardian().environ["DOCKER_HOST"] == host
        session = tool.session
    assert result["exit_code"] == 0 and result["stdout"] == "65534\n", result
    assert result["confinement"]["assurances"]["user"] == "yes", result["confinement"]
    record = result["container"]
    assert record["userns"] == "docker-remap" and record["removed"], record
    owner = int(str(record["host_owner"]).split(":")[0])
    assert any(owner in r for r in subordinate("dockremap", Path("/etc/subuid"))), owner
    assert principal_problem(owner) is None
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=sprawl.session={session}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert left.stdout.split() == []
