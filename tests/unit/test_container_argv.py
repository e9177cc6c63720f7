"""The create argv (design §3.3): one pure function, checked against the argv written out."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import (
    HostLimits,
    create_argv,
    fit_limits,
    parse_meminfo_total,
    parse_proc_limits,
)
from sprawl_orch.container.command import write_env_file
from sprawl_orch.core.errors import ErrorCode, SprawlError

IMAGE = "sha256:" + "ab" * 32
COPY = Path("/scratch/sprawl/s1/copy")
WORKDIR = Path("/home/me/project")
GiB = 1024**3
# /proc/self/limits as read on this project's machines (Debian 12, root, no CAP_SYS_RESOURCE)
PROC_LIMITS = (Path(__file__).parent / "fixtures" / "proc_self_limits.txt").read_text()
HOST = HostLimits(parse_proc_limits(PROC_LIMITS), cpus=2, memory_bytes=24 * GiB)


def argv_of(
    config: ContainerConfig | None = None,
    *,
    env: tuple[str, ...] = (),
    runtime: str | None = None,
    command: tuple[str, ...] = ("pytest", "-q"),
    host: HostLimits = HOST,
    workdir: Path | None = WORKDIR,
) -> tuple[str, ...]:
    return create_argv(
        "docker",
        config or ContainerConfig(),
        IMAGE,
        COPY,
        command,
        env,
        "s1-3",
        "s1",
        "agent-7",
        runtime,
        host=host,
        workdir=workdir,
    )


def test_the_whole_argv_in_spec_order() -> None:
    assert argv_of(env=("PATH", "LANG")) == (
        "create",
        "--pull",
        "never",
        "--name",
        "sprawl-s1-3",
        "--label",
        "sprawl.session=s1",
        "--label",
        "sprawl.run=agent-7",
        "--network",
        "none",
        "--ipc",
        "private",
        "--log-driver",
        "none",
        "--memory",
        "536870912",
        "--memory-swap",
        "536870912",
        "--cpus",
        "1",
        "--pids-limit",
        "256",
        "--cpu-shares",
        "512",
        "--user",
        "65534:65534",
        "--read-only",
        "--tmpfs",
        "/tmp:mode=1777",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--mount",
        "type=bind,src=/scratch/sprawl/s1/copy,dst=/home/me/project",
        "--workdir",
        "/home/me/project",
        "--env",
        "LANG",
        "--env",
        "PATH",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        IMAGE,
        "pytest",
        "-q",
    )


def flag(argv: tuple[str, ...], name: str) -> list[str]:
    return [argv[i + 1] for i, part in enumerate(argv[:-1]) if part == name]


def test_every_limit_comes_from_the_config() -> None:
    config = ContainerConfig(
        memory_bytes=64 * 1024 * 1024, cpus=1.5, pids=64, user="1000:100", cpu_shares=128
    )
    argv = argv_of(config)
    assert flag(argv, "--memory") == ["67108864"]
    assert flag(argv, "--memory-swap") == ["67108864"]  # no swap above the memory limit
    assert flag(argv, "--cpus") == ["1.5"]
    assert flag(argv, "--pids-limit") == ["64"]
    assert flag(argv, "--cpu-shares") == ["128"]
    assert flag(argv, "--user") == ["1000:100"]
    assert fit_limits(config, HOST).nano_cpus == 1_500_000_000


def test_exactly_one_mount_and_the_fixed_confinement_flags() -> None:
    argv = argv_of()
    assert flag(argv, "--mount") == ["type=bind,src=/scratch/sprawl/s1/copy,dst=/home/me/project"]
    assert flag(argv, "--network") == ["none"]
    assert flag(argv, "--cap-drop") == ["ALL"]
    assert flag(argv, "--security-opt") == ["no-new-privileges"]
    assert flag(argv, "--tmpfs") == ["/tmp:mode=1777"]  # usable by the command's uid
    assert flag(argv, "--pull") == ["never"]
    assert "--read-only" in argv
    assert not {"-v", "--volume", "--privileged", "--cap-add", "--rm"} & set(argv)


def test_the_copy_sits_at_the_working_directorys_path_or_its_own() -> None:
    # Absolute paths recorded in the tree (editable installs, venvs) resolve into the copy.
    assert flag(argv_of(), "--workdir") == [str(WORKDIR)]
    assert flag(argv_of(workdir=None), "--mount") == [f"type=bind,src={COPY},dst={COPY}"]


@pytest.mark.parametrize("bad", ["/", "/proc", "/sys/x", "/dev", "/a,b", "/a=b"])
def test_a_working_directory_that_cannot_be_a_destination_is_refused(bad: str) -> None:
    with pytest.raises(SprawlError) as err:
        argv_of(workdir=Path(bad))
    assert err.value.code is ErrorCode.BAD_REQUEST
    assert "/proc" in err.value.detail


def test_env_names_only_sorted_once_each() -> None:
    argv = argv_of(env=("TZ", "PATH", "TZ", "LANG"))
    assert flag(argv, "--env") == ["LANG", "PATH", "TZ"]
    assert not any("=" in name for name in flag(argv, "--env"))


@pytest.mark.parametrize("bad", ["A=B", "1X", "", "A B"])
def test_an_env_name_that_is_not_a_name_is_refused(bad: str) -> None:
    with pytest.raises(SprawlError) as err:
        argv_of(env=(bad,))
    assert err.value.code is ErrorCode.BAD_REQUEST


def test_runtime_goes_right_before_the_image() -> None:
    argv = argv_of(runtime="runc")
    at = argv.index(IMAGE)
    assert argv[at - 2 : at] == ("--runtime", "runc")
    assert "--runtime" not in argv_of(runtime=None)


def test_ulimits_sorted_and_explicit() -> None:
    config = ContainerConfig(ulimits={"nproc": "512", "nofile": "256:1024", "core": "0:0"})
    assert flag(argv_of(config), "--ulimit") == ["core=0:0", "nofile=256:1024", "nproc=512:512"]


def test_explicit_ulimit_above_the_host_hard_limit_is_refused_with_numbers() -> None:
    config = ContainerConfig(ulimits={"nofile": "30000:30000"})
    with pytest.raises(SprawlError) as err:
        argv_of(config)
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert err.value.subject == "[sandbox.container] ulimits"
    assert "30000:30000" in err.value.detail and "hard limit 20000" in err.value.detail
    assert '"20000:20000"' in err.value.recovery


def test_default_ulimits_are_lowered_to_a_smaller_host_and_said() -> None:
    small = HostLimits({**HOST.rlimits_hard, "nofile": 512}, cpus=2, memory_bytes=24 * GiB)
    limits = fit_limits(ContainerConfig(), small)
    assert ("nofile", 512, 512) in limits.ulimits
    assert limits.notes == ("ulimit nofile lowered from 1024:1024 to the host's hard limit 512",)


@pytest.mark.parametrize(
    ("ulimits", "words"),
    [
        ({"nofile": "2048:1024"}, "soft 2048 is above hard 1024"),
        ({"bogus": "1:1"}, "'bogus' is not one of"),
    ],
)
def test_malformed_ulimits_are_refused(ulimits: dict[str, str], words: str) -> None:
    with pytest.raises(SprawlError) as err:
        argv_of(ContainerConfig(ulimits=ulimits))
    assert words in err.value.detail


def test_cpus_and_memory_must_fit_the_host() -> None:
    with pytest.raises(SprawlError) as err:
        argv_of(ContainerConfig(cpus=4))
    assert "cpus = 4 but this host has 2 CPUs" in err.value.detail
    with pytest.raises(SprawlError) as err:
        argv_of(ContainerConfig(memory_bytes=32 * GiB))
    assert f"memory_bytes = {32 * GiB} is above this host's memory {24 * GiB}" in err.value.detail
    tiny = HostLimits(HOST.rlimits_hard, cpus=1, memory_bytes=512 * 1024 * 1024)
    limits = fit_limits(ContainerConfig.model_validate({"cpus": 1.0}), tiny)
    assert limits.cpus == 1.0 and limits.memory_bytes == 512 * 1024 * 1024
    lowered = fit_limits(ContainerConfig(), HostLimits(HOST.rlimits_hard, 1, 256 * 1024 * 1024))
    assert lowered.memory_bytes == 128 * 1024 * 1024 and len(lowered.notes) == 1


@pytest.mark.parametrize("image", ["busybox:latest", "sha256:abc", "ab" * 32])
def test_a_tag_or_short_id_never_reaches_the_engine(image: str) -> None:
    with pytest.raises(SprawlError) as err:
        create_argv(
            "podman", ContainerConfig(), image, COPY, ["true"], [], "t-1", "t", "r", None, host=HOST
        )
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert "sprawl-orch image pin" in err.value.recovery


@pytest.mark.parametrize("copy", ["relative/copy", "/tmp/a,b", "/tmp/a=b"])
def test_a_copy_path_that_would_change_the_mount_is_refused(copy: str) -> None:
    with pytest.raises(SprawlError) as err:
        create_argv(
            "docker",
            ContainerConfig(),
            IMAGE,
            Path(copy),
            ["true"],
            [],
            "t-1",
            "t",
            "r",
            None,
            host=HOST,
        )
    assert err.value.subject == "[sandbox] scratch_dir"


def test_tag_must_make_a_container_name() -> None:
    with pytest.raises(SprawlError) as err:
        create_argv(
            "docker",
            ContainerConfig(),
            IMAGE,
            COPY,
            ["true"],
            [],
            "-x/y",
            "t",
            "r",
            None,
            host=HOST,
        )
    assert err.value.code is ErrorCode.BAD_REQUEST


def test_host_facts_parse() -> None:
    hard = parse_proc_limits(PROC_LIMITS)
    assert hard["nofile"] == 20000 and hard["nproc"] == 96365 and hard["core"] is None
    assert len(hard) == 16
    assert parse_meminfo_total("MemTotal:       24684096 kB\nMemFree: 1 kB\n") == 24684096 * 1024
    real = HostLimits.this_host()
    assert "nofile" in real.rlimits_hard and real.cpus >= 1


@given(st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=6))
def test_the_command_is_passed_verbatim_after_the_image(command: list[str]) -> None:
    argv = argv_of(command=tuple(command))
    assert list(argv[argv.index(IMAGE) + 1 :]) == command


def test_the_values_go_in_an_env_file_of_ours(tmp_path: Path) -> None:
    # issue 30: `--env NAME` made the engine CLI read values from its own process env, so the
    # command's LD_PRELOAD loaded into podman on the host; the arm writes them to a file
    path = write_env_file({"B": "x =y", "A": "1"}, tmp_path / "e.env")
    assert path.read_text() == "A=1\nB=x =y\n"
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(SprawlError) as err:
        write_env_file({"K": "a\nb"}, tmp_path / "f.env")
    assert err.value.code is ErrorCode.BAD_REQUEST and "K" in err.value.detail
    assert not (tmp_path / "f.env").exists()
