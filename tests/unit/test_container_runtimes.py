"""`[sandbox.container] runtime` (container/runtimes.py) and the limits under gVisor
(container/gvisor.py): pure parts, with recorded facts and a probe steered by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from sprawl_orch.config import ContainerConfig, parse_config
from sprawl_orch.container import gvisor, runtimes
from sprawl_orch.container.argv import HostLimits, create_argv, fit_limits
from sprawl_orch.container.probe_container import Runtime
from sprawl_orch.container.verify import Expected, Mismatch, mismatches
from sprawl_orch.core.errors import ErrorCode, SprawlError
from tests.unit.container_fake import facts, inspect_from_argv


@pytest.fixture(autouse=True)
def any_path_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's registered paths are judged as given: no runsc needed on this machine."""
    monkeypatch.setattr(runtimes, "host_which", lambda path: path)


HOST = HostLimits({"nofile": 4096, "nproc": 4096}, 2, 8 * 1024**3)
IMAGE = "sha256:" + "a" * 64


def test_a_bad_runtime_is_refused_naming_the_choices() -> None:
    with pytest.raises(SprawlError) as err:
        parse_config({"sandbox": {"container": {"runtime": "gvisor"}}})
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert err.value.subject == "[sandbox.container] runtime"
    for spelling in ("'auto'", "'runc'", "'crun'", "'runsc'"):
        assert spelling in err.value.detail


def _probe(results: dict[str, str | None], seen: list[Runtime]) -> runtimes.Probe:
    def probe(runtime: Runtime) -> str | None:
        seen.append(runtime)
        return results.get(runtime.name)

    return probe


DOCKER = facts(
    runtimes=("runc", "runsc"),
    runtime_paths=(("runc", "runc"), ("runsc", "/usr/bin/runsc")),
    runtime_args=(("runc", ""), ("runsc", "--network=none --oci-seccomp")),
)


def test_unset_is_the_engines_default_and_never_runsc(tmp_path: Path) -> None:
    seen: list[Runtime] = []
    found = runtimes.choose("docker", DOCKER, None, tmp_path, _probe({}, seen))
    assert found == (Runtime("runc", None, "runc"), ())
    failing = runtimes.choose("docker", DOCKER, None, tmp_path, _probe({"runc": "broken"}, seen))
    assert failing == "broken"  # runsc is no silent fallback: the kernel would change
    assert all(not r.gvisor for r in seen)


def test_auto_takes_runsc_where_it_passes(tmp_path: Path) -> None:
    seen: list[Runtime] = []
    runtime, said = runtimes.choose("docker", DOCKER, "auto", tmp_path, _probe({}, seen))
    assert runtime == Runtime("runsc", "runsc", "runsc", gvisor=True) and said == ()


def test_auto_falls_back_and_says_why(tmp_path: Path) -> None:
    seen: list[Runtime] = []
    found = runtimes.choose(
        "docker", DOCKER, "auto", tmp_path, _probe({"runsc": "no sandbox"}, seen)
    )
    assert not isinstance(found, str)
    assert found[0] == Runtime("runc", None, "runc")
    assert found[1] == ("runsc not used: it failed the probe (no sandbox)",)
    bare = runtimes.choose("docker", facts(), "auto", tmp_path, _probe({}, []))
    assert not isinstance(bare, str)
    assert "runsc is not registered with the docker daemon" in bare[1][0]
    warm = runtimes.choose("docker", DOCKER, "auto", tmp_path, _probe({}, []), warm=True)
    assert not isinstance(warm, str) and not warm[0].gvisor


def test_an_explicit_runtime_is_that_one_or_refused(tmp_path: Path) -> None:
    with pytest.raises(runtimes.NoRuntime) as err:
        runtimes.choose("docker", facts(), "runsc", tmp_path, _probe({}, []))
    assert err.value.code is ErrorCode.SANDBOX_DENIED
    assert "runtimeArgs" in err.value.reason and "--network=none" in err.value.reason
    with pytest.raises(runtimes.NoRuntime) as crun:
        runtimes.choose("podman", facts(engine="podman"), "crun", tmp_path, _probe({}, []))
    assert "crun is not installed (apt-get install crun)" in crun.value.reason
    failed = runtimes.choose("docker", DOCKER, "runsc", tmp_path, _probe({"runsc": "no"}, []))
    assert failed == "no"  # the engine is refused with the probe's words, no fallback
    with pytest.raises(runtimes.NoRuntime) as warm:
        runtimes.choose("docker", DOCKER, "runsc", tmp_path, _probe({}, []), warm=True)
    assert warm.value.code is ErrorCode.CONFIG_INVALID


def test_podman_gets_runsc_as_the_wrapper_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtimes, "runsc_path", lambda: "/usr/bin/runsc")
    found = runtimes.find("podman", facts(engine="podman"), "runsc", tmp_path / "rt")
    wrapper = str(tmp_path / "rt" / gvisor.WRAPPER_NAME)
    assert found == Runtime("runsc", wrapper, wrapper, gvisor=True)
    assert (tmp_path / "rt").stat().st_mode & 0o777 == 0o700
    monkeypatch.setattr(runtimes, "runsc_path", lambda: None)
    assert (
        runtimes.find("podman", facts(engine="podman"), "runsc", tmp_path)
        == "runsc is not installed (apt-get install runsc)"
    )


def test_a_wrapper_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(PermissionError):
        gvisor.ensure_wrapper(shared, "/usr/bin/runsc")


def test_under_gvisor_pids_is_the_guests_nproc_and_the_host_gets_room() -> None:
    config = ContainerConfig(pids=64)
    plain, under = fit_limits(config, HOST), fit_limits(config, HOST, gvisor=True)
    assert plain.pids_limit == 64 and ("nproc", 1024, 1024) in plain.ulimits
    assert under.pids_limit == gvisor.host_pids(64) == 128 + 16 * 64
    assert ("nproc", 64, 64) in under.ulimits
    no_nproc = fit_limits(
        ContainerConfig(pids=64, ulimits={"nofile": "1024:1024"}), HOST, gvisor=True
    )
    assert ("nproc", 64, 64) in no_nproc.ulimits  # added: gVisor's own process limit
    argv = create_argv(
        "docker",
        config,
        IMAGE,
        Path("/copy"),
        ["true"],
        [],
        "t",
        "s",
        "r",
        "runsc",
        host=HOST,
        gvisor=True,
    )
    assert argv[argv.index("--pids-limit") + 1] == str(128 + 16 * 64)
    assert "nproc=64:64" in argv and argv[argv.index("--runtime") + 1] == "runsc"
    # verification expects exactly these numbers
    expected = Expected.of("docker", config, HOST, IMAGE, Path("/copy"), "runsc", gvisor=True)
    assert mismatches(expected, inspect_from_argv(argv, "runc")) == []
    plain_expected = Expected.of("docker", config, HOST, IMAGE, Path("/copy"), "runsc")
    assert {m.field for m in mismatches(plain_expected, inspect_from_argv(argv, "runc"))} == {
        "pids_limit",
        "ulimits",
    }


def test_the_runtime_is_verified_exactly() -> None:
    argv = create_argv(
        "docker",
        ContainerConfig(),
        IMAGE,
        Path("/copy"),
        ["true"],
        [],
        "t",
        "s",
        "r",
        "/state/runtimes/runsc-nonet",
        host=HOST,
    )
    inspect = inspect_from_argv(argv, "runc")
    inspect["OCIRuntime"] = "/elsewhere/runsc-nonet"  # same file name, another runtime
    expected = Expected.of(
        "podman", ContainerConfig(), HOST, IMAGE, Path("/copy"), "/state/runtimes/runsc-nonet"
    )
    found = [m for m in mismatches(expected, inspect) if m.field == "runtime"]
    assert found == [
        Mismatch("runtime", "OCIRuntime", "/state/runtimes/runsc-nonet", "/elsewhere/runsc-nonet")
    ]


def test_the_note_names_gvisors_kernel() -> None:
    assert gvisor.gvisor_note().startswith(gvisor.KERNEL_NOTE)
    assert "OOM" not in gvisor.gvisor_note()  # reported as under runc (test_gvisor_arm.py)


def test_runsc_under_a_user_namespace_is_explained() -> None:
    from sprawl_orch.container.admission_words import explain, runsc_failure

    words = (
        "OCI runtime error: creating container: cannot create sandbox: cannot read "
        "client sync file: waiting for sandbox to start: EOF"
    )
    reason, recovery = explain("docker", "runsc", words, ContainerConfig(), HOST)
    assert reason.startswith("runsc cannot start its sandbox under docker's user namespace")
    assert "0700" in reason and words in reason and 'runtime = "auto"' in recovery
    assert "user namespace was kept" in runsc_failure(words, userns=True)
    assert runsc_failure("other", userns=True) == "runsc not used: it failed the probe (other)"


def test_a_daemon_runtime_named_runsc_must_be_runsc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    impostor = facts(
        runtimes=("runc", "runsc"), runtime_paths=(("runc", "runc"), ("runsc", "/usr/bin/runc"))
    )
    why = runtimes.find("docker", impostor, "runsc", tmp_path)
    assert isinstance(why, str) and "not gVisor's runsc binary" in why and "'/usr/bin/runc'" in why
    real = runtimes.find("docker", DOCKER, "runsc", tmp_path)
    assert real == Runtime("runsc", "runsc", "runsc", gvisor=True)


def test_docker_runsc_without_oci_seccomp_is_refused(tmp_path: Path) -> None:
    """gVisor loads the container's seccomp profile only with --oci-seccomp: a daemon
    running runsc without it would run commands past sprawl-orch's socket policy (measured:
    io_uring_setup and NETLINK_KOBJECT_UEVENT opened under runsc 0.0~20221219)."""
    bare = facts(
        runtimes=("runc", "runsc"),
        runtime_paths=(("runc", "runc"), ("runsc", "/usr/bin/runsc")),
        runtime_args=(("runsc", "--network=none"),),
    )
    why = runtimes.find("docker", bare, "runsc", tmp_path)
    assert isinstance(why, str) and "without --oci-seccomp" in why
    assert "--network=none" in why and '"--oci-seccomp"' in why  # names the fix
    with pytest.raises(runtimes.NoRuntime) as err:
        runtimes.choose("docker", bare, "runsc", tmp_path, _probe({}, []))
    assert "--oci-seccomp" in err.value.reason
    seen: list[Runtime] = []
    fallback = runtimes.choose("docker", bare, "auto", tmp_path, _probe({}, seen))
    assert not isinstance(fallback, str) and not fallback[0].gvisor
    assert "without --oci-seccomp" in fallback[1][0]


def test_podmans_runsc_wrapper_loads_the_oci_profile(tmp_path: Path) -> None:
    text = gvisor.wrapper_text("/usr/bin/runsc")
    assert text == '#!/bin/sh\nexec /usr/bin/runsc --network=none --oci-seccomp "$@"\n'
