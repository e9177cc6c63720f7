"""Admission (design §3.1): parsing the engines' own recorded answers, explaining their
recorded failure words, and the admission steps over a small fake backend."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.config import ContainerConfig, EngineImages
from sprawl_orch.container.admission import admit, clear_cache
from sprawl_orch.container.admission_words import explain
from sprawl_orch.container.argv import HostLimits
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines import docker as docker_backend
from sprawl_orch.engines import podman as podman_backend
from tests.unit.container_fake import FIXTURES, FakeEngine, facts, fixture_json

IMAGE = "sha256:" + "cd" * 32
HOST = HostLimits({"nofile": 20000, "nproc": 96365}, cpus=2, memory_bytes=24 * 1024**3)
# the caller's own uid: the probe's copy must be giveable to the user without root (CI)
ME = f"{os.getuid()}:{os.getgid()}"
CONFIG = ContainerConfig(images=EngineImages(docker=IMAGE), user=ME)


def words(name: str) -> str:
    return (FIXTURES / name).read_text().strip()


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


# -- the engines' own facts ---------------------------------------------------------------


def test_docker_facts_from_recorded_info_and_version() -> None:
    found = docker_backend.parse_facts(
        fixture_json("docker_info.json"), fixture_json("docker_version.json")
    )
    assert (found.server_version, found.api_version) == ("20.10.24+dfsg1", "1.41")
    assert (found.os, found.arch) == ("linux", "x86_64")
    assert (found.cgroup_version, found.cgroup_driver) == ("1", "cgroupfs")
    assert found.unsupported_limits() == []
    assert (found.rootless, found.userns_remap) == (False, False)
    assert (found.default_runtime, found.runtimes) == ("runc", ("runc",))
    kept, why = found.uids_namespaced()
    assert not kept and "rootful without user-namespace remapping" in why


@pytest.mark.parametrize(
    ("option", "rootless", "userns"),
    [
        ("name=rootless", True, False),
        ("name=userns", False, True),
    ],
)
def test_docker_userns_and_rootless_from_security_options(
    option: str, rootless: bool, userns: bool
) -> None:
    info = fixture_json("docker_info.json")
    info["SecurityOptions"] = [*info["SecurityOptions"], option]
    found = docker_backend.parse_facts(info, fixture_json("docker_version.json"))
    assert (found.rootless, found.userns_remap) == (rootless, userns)
    assert found.uids_namespaced()[0] is True


def test_docker_missing_limit_support_is_named() -> None:
    info = fixture_json("docker_info.json")
    info.update(PidsLimit=False, SwapLimit=False)
    found = docker_backend.parse_facts(info, {})
    assert found.unsupported_limits() == ["memory-swap", "pids"]


def test_podman_facts_from_recorded_info() -> None:
    info = fixture_json("podman_info.json")
    found = podman_backend.parse_facts(info, ["runc"])
    assert (found.server_version, found.cgroup_version, found.cgroup_driver) == (
        "4.3.1",
        "1",
        "cgroupfs",
    )
    assert (found.default_runtime, found.runtimes) == ("runc", ("runc",))
    assert not found.rootless and not found.uids_namespaced()[0]
    assert found.unsupported_limits() == []
    rootless = copy.deepcopy(info)
    rootless["host"]["security"]["rootless"] = True
    rootless["host"]["idMappings"]["uidmap"] = [{"container_id": 0, "host_id": 1000, "size": 1}]
    rootless["host"]["cgroupControllers"] = []
    found = podman_backend.parse_facts(rootless, ["crun", "runc"])
    assert found.uids_namespaced() == (True, found.uids_namespaced()[1])
    assert "subordinate uid range" in found.uids_namespaced()[1]
    assert found.unsupported_limits() == ["memory", "memory-swap", "pids", "cpu quota"]
    assert found.runtimes == ("runc", "crun")


# -- the engines' own failure words -------------------------------------------------------


def test_crun_on_a_hybrid_cgroup_host_is_explained() -> None:
    text = words("words_crun_hybrid.txt")
    assert "cgroups in hybrid mode not supported" in text
    reason, recovery = explain("podman", "crun", text, CONFIG, HOST)
    assert "crun runtime cannot run containers on this host's hybrid cgroup" in reason
    assert text in reason
    assert "runc" in recovery


@pytest.mark.parametrize(
    "recorded",
    [
        words("words_rlimit_docker.txt"),
        words("words_rlimit_podman.txt"),
        # crun's words for the same fault, seen on this host before the runtime was pinned
        "Error: crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: OCI permission denied",
    ],
)
def test_rlimits_above_the_hard_limit_are_explained(recorded: str) -> None:
    config = ContainerConfig(ulimits={"nofile": "40000:40000"})
    reason, recovery = explain("docker", "runc", recorded, config, HOST)
    assert "may not set the asked rlimits (nofile=40000:40000)" in reason
    assert recorded in reason
    assert (
        "lower [sandbox.container] ulimits to at most the hard limits (nofile 20000 here)"
        in recovery
    )


@pytest.mark.parametrize(
    "recorded",
    [
        words("words_socket_refused.txt"),
        "Cannot connect to the Docker daemon at unix:///tmp/dead.sock. Is the docker daemon "
        "running?",
        "Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, "
        "'No such file or directory'))",
    ],
)
def test_a_daemon_that_is_not_running_is_explained(
    recorded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    reason, recovery = explain("docker", "", recorded, CONFIG, HOST)
    # Which address, where it came from, and the fix for that error (issue 27, item 7).
    assert "docker's default" in reason, reason
    assert "start the docker daemon" in recovery or "start the daemon" in recovery
    assert "DOCKER_HOST" in recovery and "apt-get install" not in recovery
    # Nothing came from the environment: a server an MCP client started may lack it.
    assert "MCP client" in recovery


def test_a_dead_docker_host_names_the_variable_and_a_socket_that_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/gone.sock")
    words = (
        f"cannot reach the daemon at unix://{tmp_path}/gone.sock: Error while fetching server "
        "API version: ('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))"
    )
    reason, recovery = explain("docker", "", words, CONFIG, HOST)
    assert f"no docker socket at {tmp_path}/gone.sock" in reason
    assert "comes from DOCKER_HOST" in reason and "MCP" not in recovery
    config = CONFIG.model_copy(update={"docker_host": f"unix://{tmp_path}/gone.sock"})
    reason, recovery = explain("docker", "", words, config, HOST)
    assert "[sandbox.container] docker_host" in reason
    assert "change [sandbox.container] docker_host" in recovery


def test_socket_permission_names_owner_group_and_mode(tmp_path: Path) -> None:
    import socket as socketlib

    path = tmp_path / "docker.sock"
    server = socketlib.socket(socketlib.AF_UNIX)
    server.bind(str(path))
    path.chmod(0o660)
    try:
        reason, recovery = explain(
            "docker",
            "",
            "permission denied while trying to connect to the Docker daemon socket "
            f"at unix://{path}",
            CONFIG.model_copy(update={"docker_host": f"unix://{path}"}),
            HOST,
        )
    finally:
        server.close()
    assert f"may not use the docker socket {path}" in reason
    assert "mode 0660" in reason and "usermod -aG" in recovery
    reason, _ = explain("docker", "runc", "something new", CONFIG, HOST)
    assert reason == "docker failed the probe container: something new"


# -- the steps, over a fake backend ---------------------------------------------------------


def test_admitted_with_facts_image_and_a_passing_probe(tmp_path: Path) -> None:
    engine = FakeEngine(images=[IMAGE])
    admission = admit(engine, CONFIG, HOST)  # type: ignore[arg-type]
    assert admission.admitted, admission.reason
    assert (admission.image, admission.runtime, admission.runtime_used) == (IMAGE, None, "runc")
    assert not admission.uids_namespaced and admission.notes == ()
    creates = [c for c in engine.calls if c[0] == "create"]
    assert len(creates) == 1 and creates[0][1][-1] == "true"  # the probe runs `true`
    assert engine.containers == {}, "the probe container was not removed"
    assert admission.as_dict()["runtime"] == "runc"


def test_admission_is_cached_per_engine_and_config() -> None:
    engine = FakeEngine(images=[IMAGE])
    first = admit(engine, CONFIG, HOST)  # type: ignore[arg-type]
    assert admit(engine, CONFIG, HOST) is first  # type: ignore[arg-type]
    assert [c for c in engine.calls if c[0] == "facts"] == [("facts", None)]
    other = ContainerConfig(images=EngineImages(docker=IMAGE), pids=64, user=ME)
    assert admit(engine, other, HOST) is not first  # type: ignore[arg-type]


def test_default_runtime_failing_falls_back_and_says_so() -> None:
    engine = FakeEngine(facts(default_runtime="crun", runtimes=("crun", "runc")), [IMAGE])
    engine.fail_start = {None: words("words_crun_hybrid.txt")}
    admission = admit(engine, CONFIG, HOST)  # type: ignore[arg-type]
    assert admission.admitted
    assert (admission.runtime, admission.runtime_used) == ("runc", "runc")
    [said] = admission.notes
    assert said.startswith("the default runtime crun failed the probe (")
    assert "hybrid mode not supported" in said
    assert said.endswith("runc passed it, so every container runs with --runtime runc")
    assert "runs under runc" in admission.summary()


def test_every_runtime_failing_refuses_with_the_first_words() -> None:
    engine = FakeEngine(facts(default_runtime="crun", runtimes=("crun", "runc")), [IMAGE])
    engine.fail_start = {None: words("words_crun_hybrid.txt"), "runc": "runc broke"}
    admission = admit(engine, CONFIG, HOST)  # type: ignore[arg-type]
    assert not admission.admitted
    assert admission.code is ErrorCode.SANDBOX_DENIED
    assert "hybrid cgroup" in admission.reason
    assert admission.missing is not None and admission.missing.kind == "container_runtime"
    err = admission.error()
    assert err.code is ErrorCode.SANDBOX_DENIED and err.recovery == admission.recovery


def test_an_engine_that_drops_a_limit_fails_the_probe_by_inspect() -> None:
    engine = FakeEngine(images=[IMAGE])
    engine.alter = lambda d: d["HostConfig"].update(PidsLimit=0)
    admission = admit(engine, CONFIG, HOST)  # type: ignore[arg-type]
    assert not admission.admitted
    assert "HostConfig.PidsLimit: expected 256, found 0" in admission.reason
    assert ("start", "c1") not in engine.calls, "an unverified probe was started"


def test_missing_image_is_image_not_local() -> None:
    admission = admit(FakeEngine(images=[]), CONFIG, HOST)  # type: ignore[arg-type]
    assert not admission.admitted and admission.code is ErrorCode.TOOL_UNAVAILABLE
    assert admission.missing is not None and admission.missing.kind == "image_not_local"
    unpinned = admit(FakeEngine(images=[IMAGE]), ContainerConfig(user=ME), HOST)  # type: ignore[arg-type]
    assert unpinned.missing is not None and "no image is pinned" in unpinned.missing.phrase


def test_connect_failure_and_unsupported_limits_refuse_before_any_container() -> None:
    down = FakeEngine(images=[IMAGE])
    down.facts_error = SprawlError(
        ErrorCode.ENGINE_REFUSED, "docker connect", words("words_socket_refused.txt"), "x"
    )
    admission = admit(down, CONFIG, HOST)  # type: ignore[arg-type]
    assert not admission.admitted and admission.code is ErrorCode.TOOL_UNAVAILABLE
    assert "no docker socket at" in admission.reason or "nothing answers at" in admission.reason
    assert not [c for c in down.calls if c[0] == "create"]
    weak = FakeEngine(facts(pids_limit=False), [IMAGE])
    admission = admit(weak, CONFIG, HOST)  # type: ignore[arg-type]
    assert not admission.admitted and "no support for pids limits" in admission.reason


def test_explicit_limits_the_host_cannot_give_refuse_admission() -> None:
    config = ContainerConfig(images=EngineImages(docker=IMAGE), cpus=8, user=ME)
    admission = admit(FakeEngine(images=[IMAGE]), config, HOST)  # type: ignore[arg-type]
    assert not admission.admitted and admission.code is ErrorCode.CONFIG_INVALID
    assert "cpus = 8 but this host has 2 CPUs" in admission.reason


def test_a_copy_the_user_cannot_be_given_refuses_with_its_own_recovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sprawl_orch.container.probe_container as admission_module

    def refuse(
        engine: object, userns: object, root: Path, owner: tuple[int, int], user: tuple[int, int]
    ) -> None:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            str(root),
            "cannot give the copy to the container user 65534:65534",
            'set [sandbox.container] user = "1000:1000"',
        )

    monkeypatch.setattr(admission_module, "give_copy", refuse)
    engine = FakeEngine(images=[IMAGE])
    admission = admit(engine, CONFIG, HOST)  # type: ignore[arg-type]
    assert not admission.admitted and admission.code is ErrorCode.SANDBOX_DENIED
    assert admission.recovery == 'set [sandbox.container] user = "1000:1000"'
    # the copy is owned between create and start (podman --userns=auto's map is known
    # only after create): the probe container was never started, and it was removed
    assert not [c for c in engine.calls if c[0] == "start"]
    assert engine.containers == {}
