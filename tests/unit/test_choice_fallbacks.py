"""Every step of `auto`'s descent, forced through described machines (`Offerings` values),
and every explicitly named arm whose mechanism is missing: Unavailable, never weaker."""

from __future__ import annotations

from pathlib import Path

import pytest

from sprawl_orch.config import Config
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.engine_offer import EngineOffer
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.selection.arm_factory import build_arm
from sprawl_orch.selection.choice import choose
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config

SCRATCH = Path("/nonexistent-scratch")
DOCKER_OK = EngineOffer("docker", admitted=True, detail="docker 20.10", image="sha256:" + "a" * 64)
PODMAN_OK = EngineOffer("podman", admitted=True, detail="podman 4.3", image="sha256:" + "b" * 64)
DOCKER_REFUSED = EngineOffer("docker", admitted=False, detail="socket refused")
PODMAN_REFUSED = EngineOffer("podman", admitted=False, detail="not installed")
REFUSED = (DOCKER_REFUSED, PODMAN_REFUSED)


def linux(**kw: object) -> Offerings:
    base: dict[str, object] = {
        "platform": "linux",
        "scratch": SCRATCH,
        "bwrap": "/usr/bin/bwrap",
        "user_namespace": True,
        "engines": REFUSED,
    }
    base.update(kw)
    return Offerings(**base)  # type: ignore[arg-type]


def kinds(choice_missing: tuple[object, ...]) -> list[str]:
    return [m.kind for m in choice_missing]  # type: ignore[attr-defined]


# -- auto: container first, then native, then the copied tree; each step said ---------
def test_auto_takes_an_admitted_engine() -> None:
    choice = choose("auto", linux(engines=(DOCKER_OK, PODMAN_OK)))
    assert (choice.arm, choice.engine, choice.missing) == (ArmName.CONTAINER, "docker", ())


def test_auto_takes_the_next_engine_when_the_first_is_refused() -> None:
    choice = choose("auto", linux(engines=(DOCKER_REFUSED, PODMAN_OK)))
    assert (choice.arm, choice.engine) == (ArmName.CONTAINER, "podman")
    # ... and says what it stepped past (issue 27, item 9), for `container` too.
    assert [m.phrase for m in choice.missing] == ["docker passed over for podman: socket refused"]
    named = choose("container", linux(engines=(DOCKER_REFUSED, PODMAN_OK)))
    assert named.missing == choice.missing
    assert "because docker passed over for podman" in choice.reason()


def test_an_engine_passed_for_the_user_axis_is_named() -> None:
    keeps = EngineOffer("podman", admitted=True, detail="podman 4.3", uids_namespaced=True)
    choice = choose("auto", linux(engines=(DOCKER_OK, keeps)))
    assert choice.engine == "podman"
    assert (
        "docker passed over for podman: it does not keep the user axis" in choice.missing[0].phrase
    )


def test_auto_steps_down_to_bwrap_and_says_why() -> None:
    choice = choose("auto", linux())
    assert choice.arm is ArmName.LINUX_NAMESPACES
    assert kinds(choice.missing) == ["container_runtime"]
    reason = choice.reason()
    assert "docker: socket refused" in reason and "podman: not installed" in reason
    assert "resolves to linux_namespaces" in reason


def test_auto_names_the_missing_image_when_the_engine_works() -> None:
    from sprawl_orch.core.arms import image_not_local

    engine = EngineOffer(
        "docker",
        admitted=False,
        detail="image missing",
        image_missing=image_not_local("docker", None),
    )
    choice = choose("auto", linux(engines=(engine, PODMAN_REFUSED)))
    assert choice.arm is ArmName.LINUX_NAMESPACES
    # Both engines' faults are named: the image docker lacks, and podman's own words.
    assert kinds(choice.missing) == ["image_not_local", "container_runtime"]
    assert "sprawl-orch image build" in choice.missing[0].recovery
    assert "[sandbox.container.images] docker" in choice.missing[0].phrase
    assert "podman: not installed" in choice.reason() and "docker:" not in choice.missing[1].phrase


def test_auto_names_a_dead_socket_and_a_missing_pin_together() -> None:
    from sprawl_orch.core.arms import image_not_local

    podman = EngineOffer(
        "podman",
        admitted=False,
        detail="image missing",
        image_missing=image_not_local("podman", None),
    )
    choice = choose("auto", linux(engines=(DOCKER_REFUSED, podman)))
    said = choice.reason()
    assert "docker: socket refused" in said and "no image is pinned for podman" in said


@pytest.mark.parametrize("asked", ["auto", "container"])
def test_a_limit_the_host_cannot_give_refuses_and_never_steps_down(asked: str) -> None:
    from sprawl_orch.core.arms import config_invalid

    fault = config_invalid(
        "[sandbox.container] cpus", "cpus = 100 but this host has 2 CPUs", "write cpus = 2 or fewer"
    )
    docker = EngineOffer("docker", admitted=False, detail="cpus", config_fault=fault)
    podman = EngineOffer("podman", admitted=False, detail="cpus", config_fault=fault)
    choice = choose(asked, linux(engines=(docker, podman)))
    assert choice.arm is ArmName.UNAVAILABLE and kinds(choice.missing) == ["config_invalid"]
    with pytest.raises(SprawlError) as caught:
        build_arm(choice, linux(engines=(docker, podman)), Config())
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert caught.value.subject == "[sandbox.container] cpus"
    assert "apt-get" not in caught.value.recovery and "cpus = 2" in caught.value.recovery


def test_auto_names_every_engine_whose_image_is_missing() -> None:
    from sprawl_orch.core.arms import image_not_local

    docker = EngineOffer(
        "docker",
        admitted=False,
        detail="image missing",
        image_missing=image_not_local("docker", None),
    )
    podman = EngineOffer(
        "podman",
        admitted=False,
        detail="image missing",
        image_missing=image_not_local("podman", "sha256:" + "c" * 64),
    )
    choice = choose("auto", linux(engines=(docker, podman)))
    assert kinds(choice.missing) == ["image_not_local", "image_not_local"]
    reason = choice.reason()
    assert "pinned for docker" in reason and "not present in podman" in reason


def test_auto_without_bwrap_takes_the_copied_tree_and_says_both_steps() -> None:
    choice = choose("auto", linux(bwrap=None, user_namespace=None))
    assert choice.arm is ArmName.COPIED_TREE
    # the kernel of linux() has no Landlock (landlock_abi 0): that step is said too
    assert kinds(choice.missing) == ["container_runtime", "namespace_wrapper", "landlock"]
    assert "apt-get install bubblewrap" in choice.missing[1].recovery


def test_auto_with_bwrap_but_no_user_namespace_takes_the_copied_tree() -> None:
    choice = choose(
        "auto",
        linux(user_namespace=False, user_namespace_why="setting up uid map: Permission denied"),
    )
    assert choice.arm is ArmName.COPIED_TREE
    assert kinds(choice.missing) == ["container_runtime", "user_namespace", "landlock"]
    assert "Permission denied" in choice.missing[1].phrase


@pytest.mark.parametrize(
    ("platform", "extra", "native"),
    [
        ("darwin", {"sandbox_exec": "/usr/bin/sandbox-exec"}, ArmName.MACOS_SEATBELT),
        ("win32", {"windows_job": True}, ArmName.WINDOWS_JOB),
    ],
)
def test_auto_takes_the_platforms_native_arm(
    platform: str, extra: dict[str, object], native: ArmName
) -> None:
    choice = choose("auto", Offerings(platform=platform, scratch=SCRATCH, engines=REFUSED, **extra))  # type: ignore[arg-type]
    assert choice.arm is native and kinds(choice.missing) == ["container_runtime"]


@pytest.mark.parametrize(
    ("platform", "missing"),
    [
        ("darwin", "seatbelt"),
        ("win32", "job_leaf"),
        ("freebsd14", "platform"),
    ],
)
def test_auto_without_a_native_arm_takes_the_copied_tree(platform: str, missing: str) -> None:
    choice = choose("auto", Offerings(platform=platform, scratch=SCRATCH, engines=REFUSED))
    assert choice.arm is ArmName.COPIED_TREE
    assert kinds(choice.missing) == ["container_runtime", missing]


def test_no_scratch_directory_is_unavailable_for_every_sandbox_arm() -> None:
    offerings = linux(scratch=None, scratch_problem="/tmp/sprawl-orch: Read-only file system")
    for name in ("auto", "container", "native", "copied_tree"):
        choice = choose(name, offerings)
        assert choice.arm is ArmName.UNAVAILABLE, name
        assert kinds(choice.missing) == ["scratch_directory"]


# -- an explicit name: its mechanism or nothing -----------------------------------------
@pytest.mark.parametrize(
    ("offerings", "missing"),
    [
        (linux(bwrap=None, user_namespace=None), ["namespace_wrapper", "landlock"]),
        (linux(user_namespace=False, user_namespace_why="denied"), ["user_namespace", "landlock"]),
        (Offerings(platform="darwin", scratch=SCRATCH), ["seatbelt"]),
        (Offerings(platform="win32", scratch=SCRATCH), ["job_leaf"]),
    ],
)
def test_explicit_native_that_is_missing_is_unavailable(
    offerings: Offerings, missing: list[str]
) -> None:
    choice = choose("native", offerings)
    assert choice.arm is ArmName.UNAVAILABLE
    assert kinds(choice.missing) == missing
    assert choice.reason().startswith("native is unavailable")


def test_explicit_container_never_falls_to_native() -> None:
    choice = choose("container", linux())
    assert choice.arm is ArmName.UNAVAILABLE
    assert kinds(choice.missing) == ["container_runtime"]


def test_a_named_engine_is_never_swapped_for_another() -> None:
    choice = choose("container", linux(engines=(DOCKER_OK, PODMAN_REFUSED)), engine="podman")
    assert choice.arm is ArmName.UNAVAILABLE
    assert "podman: not installed" in choice.reason()


def test_building_an_unavailable_arm_refuses(tmp_path: Path) -> None:
    choice = choose("native", linux(bwrap=None, user_namespace=None))
    with pytest.raises(SprawlError) as raised:
        build_arm(choice, linux(), Config())
    assert raised.value.code is ErrorCode.SANDBOX_DENIED
    assert "bubblewrap" in raised.value.detail


def test_exec_with_explicit_native_missing_refuses_before_copying(
    tmp_path: Path, tree: Path, scratch: Path
) -> None:
    offerings = linux(scratch=scratch, bwrap=None, user_namespace=None)
    with ExecTool(make_config(tmp_path, arm="native"), tree, offerings=offerings) as tool:
        result = tool.exec(["sh", "-c", "echo ran > ran.txt"])
        assert list(scratch.iterdir()) == []
    assert result.outcome == "exceptional"
    assert result.arm == "unavailable" and result.code == ErrorCode.SANDBOX_DENIED.value
    assert result.recovery is not None and "bubblewrap" in result.recovery
    assert not (tree / "ran.txt").exists()
