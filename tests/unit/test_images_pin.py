"""`image pin` without an engine: a fake resolver stands in for `image inspect`, the file
writes are real. Plus the Dockerfile FROM parser the builder checks before building."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from sprawl_orch.config import load_config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.images.dockerfile import DockerfileError, external_bases, logical_lines
from sprawl_orch.images.engines import ImageEngine
from sprawl_orch.images.pin import pin, render

D1 = "sha256:" + "d1" * 32
D2 = "sha256:" + "d2" * 32
P1 = "sha256:" + "a1" * 32
OLD = "sha256:" + "00" * 32


def resolver_for(table: Mapping[tuple[str, str], str]):  # type: ignore[no-untyped-def]
    """A fake local store: {(engine, ref): ID}; anything else is not local."""
    asked: list[tuple[str, str]] = []

    def resolve(engine: str, ref: str) -> str | None:
        asked.append((engine, ref))
        return table.get((engine, ref))

    resolve.asked = asked  # type: ignore[attr-defined]
    return resolve


ORIGINAL = """\
# sprawl-orch settings for this repo (kept by hand)
[sandbox]
arm = "container"   # container first, always
shell = true

# limits chosen for the CI runners
[sandbox.container]
engine = "auto"
memory_bytes = 1073741824  # 1 GiB

[state]
dir = "/var/lib/sprawl"  # survives reboots
"""


def test_pin_shared_id_round_trip_keeps_comments_and_order(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(ORIGINAL)
    resolve = resolver_for(
        {("docker", "sprawl/busybox:latest"): D1, ("podman", "sprawl/busybox:latest"): D1}
    )

    result = pin("sprawl/busybox:latest", config, resolver=resolve)

    assert result.written == {"[sandbox.container] image": D1}
    assert config.read_text() == ORIGINAL.replace(
        "memory_bytes = 1073741824  # 1 GiB\n",
        f'memory_bytes = 1073741824  # 1 GiB\nimage = "{D1}"\n',
    )
    assert load_config(config).sandbox.container.image == D1
    assert result.config is not None and result.config.sandbox.container.image_for("podman") == D1


def test_pin_replaces_an_old_id_in_place_keeping_its_comment(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    text = f'[sandbox.container]\nimage = "{OLD}"  # pinned 2024-01\nengine = "docker"\n'
    config.write_text(text)

    pin(
        "sprawl/busybox:latest",
        config,
        engine_name=None,
        resolver=resolver_for(
            {("docker", "sprawl/busybox:latest"): D1, ("podman", "sprawl/busybox:latest"): D1}
        ),
    )

    assert config.read_text() == text.replace(OLD, D1)


def test_pin_for_one_engine_writes_the_per_engine_table(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(ORIGINAL)
    resolve = resolver_for({("docker", "t:1"): D1, ("podman", "t:1"): P1})

    result = pin("t:1", config, engine_name="podman", resolver=resolve)

    assert result.written == {"[sandbox.container.images] podman": P1}
    assert resolve.asked == [("podman", "t:1")]  # type: ignore[attr-defined]
    text = config.read_text()
    assert text.startswith(ORIGINAL.split("[state]")[0])  # everything before is untouched
    assert f'[sandbox.container.images]\npodman = "{P1}"\n\n[state]\n' in text
    loaded = load_config(config).sandbox.container
    assert (loaded.image_for("podman"), loaded.image_for("docker")) == (P1, None)


def test_ref_local_in_one_engine_only_pins_that_engine(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    result = pin(D1[:19], config, resolver=resolver_for({("docker", D1[:19]): D1}))
    assert result.written == {"[sandbox.container.images] docker": D1}
    assert result.resolved == {"docker": D1}
    assert config.read_text() == f'[sandbox.container.images]\ndocker = "{D1}"\n'


def test_tag_with_different_ids_per_engine_pins_each(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(ORIGINAL)
    pin("t:1", config, resolver=resolver_for({("docker", "t:1"): D1, ("podman", "t:1"): P1}))
    loaded = load_config(config).sandbox.container
    assert (loaded.image, loaded.image_for("docker"), loaded.image_for("podman")) == (None, D1, P1)


def test_shared_pin_removes_per_engine_pins_that_would_shadow_it(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(f'[sandbox.container.images]\ndocker = "{D2}"\npodman = "{P1}"\n')
    result = pin(
        "t:2", config, resolver=resolver_for({("docker", "t:2"): D1, ("podman", "t:2"): D1})
    )
    assert result.removed == {
        "[sandbox.container.images] docker": D2,
        "[sandbox.container.images] podman": P1,
    }
    loaded = load_config(config).sandbox.container
    assert (loaded.image_for("docker"), loaded.image_for("podman")) == (D1, D1)


@pytest.mark.parametrize(
    "layout",
    [
        '[sandbox]\narm = "container"\ncontainer.engine = "docker"  # dotted\n',
        '[sandbox]\ncontainer = { engine = "docker" }\n',
        'sandbox.container.engine = "docker"\n',
    ],
    ids=["dotted", "inline", "top-dotted"],
)
def test_per_engine_pin_into_dotted_and_inline_layouts(tmp_path: Path, layout: str) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(layout)
    pin("t:1", config, engine_name="docker", resolver=resolver_for({("docker", "t:1"): D1}))
    loaded = load_config(config).sandbox.container
    assert (loaded.engine, loaded.image_for("docker")) == ("docker", D1)
    assert "# dotted" in config.read_text() or "dotted" not in layout


def test_tag_not_local_is_refused_and_the_file_is_unchanged(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(ORIGINAL)
    resolve = resolver_for({})
    with pytest.raises(SprawlError) as caught:
        pin("alpine:3.19", config, resolver=resolve)
    err = caught.value
    assert err.code is ErrorCode.IMAGE_INVALID
    assert err.subject == "alpine:3.19"
    assert "never pulls" in err.detail and "docker or podman" in err.detail
    assert "sprawl-orch image build busybox" in err.recovery
    assert resolve.asked == [("docker", "alpine:3.19"), ("podman", "alpine:3.19")]  # type: ignore[attr-defined]
    assert config.read_text() == ORIGINAL


def test_engine_given_but_ref_only_in_the_other_engine_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    with pytest.raises(SprawlError) as caught:
        pin("t:1", config, engine_name="docker", resolver=resolver_for({("podman", "t:1"): P1}))
    assert caught.value.code is ErrorCode.IMAGE_INVALID
    assert "--engine docker" in caught.value.recovery
    assert not config.exists()


def test_unreachable_engine_is_noted_and_the_other_pinned(tmp_path: Path) -> None:
    def resolve(engine: str, ref: str) -> str | None:
        if engine == "docker":
            raise SprawlError(ErrorCode.TOOL_UNAVAILABLE, "docker", "daemon down", "start it")
        return P1

    result = pin("t:1", tmp_path / "sprawl.toml", resolver=resolve)
    assert result.written == {"[sandbox.container.images] podman": P1}
    assert result.notes == ("docker not asked: daemon down",)


def test_a_pin_that_would_leave_an_invalid_config_writes_nothing(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    text = '[sandbox]\narm = "contaner"  # typo\n'
    config.write_text(text)
    with pytest.raises(SprawlError) as caught:
        pin("t:1", config, engine_name="docker", resolver=resolver_for({("docker", "t:1"): D1}))
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "[sandbox] arm" in caught.value.subject
    assert config.read_text() == text
    assert os.listdir(tmp_path) == ["sprawl.toml"]


def test_invalid_toml_is_refused_unchanged(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text("[sandbox\n")
    with pytest.raises(SprawlError) as caught:
        pin("t:1", config, engine_name="docker", resolver=resolver_for({("docker", "t:1"): D1}))
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert config.read_text() == "[sandbox\n"


def test_config_whose_parent_is_a_file_is_storage_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file\n")
    with pytest.raises(SprawlError) as caught:
        pin(
            "t:1",
            blocker / "sprawl.toml",
            engine_name="docker",
            resolver=resolver_for({("docker", "t:1"): D1}),
        )
    err = caught.value
    assert err.code is ErrorCode.STORAGE_FATAL
    assert err.subject == str(blocker / "sprawl.toml")
    assert "Not a directory" in err.detail and "ENOTDIR" in err.detail
    assert blocker.read_text() == "a file\n"


def test_failed_replace_leaves_the_file_unchanged_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(ORIGINAL)

    def refuse(src: str, dst: object) -> None:
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(SprawlError) as caught:
        pin("t:1", config, engine_name="docker", resolver=resolver_for({("docker", "t:1"): D1}))
    err = caught.value
    assert err.code is ErrorCode.STORAGE_FATAL
    assert str(config) in err.detail and "Permission denied (EACCES)" in err.detail
    assert "unchanged" in err.detail
    assert config.read_text() == ORIGINAL
    assert os.listdir(tmp_path) == ["sprawl.toml"]


def test_immutable_config_is_storage_fatal_and_unchanged(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(ORIGINAL)
    chattr = shutil.which("chattr")
    made = (
        chattr is not None
        and subprocess.run([chattr, "+i", str(config)], capture_output=True, check=False).returncode
        == 0
    )
    if not made:
        pytest.skip("chattr +i is not supported here (needs root on ext4/xfs/btrfs)")
    try:
        with pytest.raises(SprawlError) as caught:
            pin("t:1", config, engine_name="docker", resolver=resolver_for({("docker", "t:1"): D1}))
        assert caught.value.code is ErrorCode.STORAGE_FATAL
        assert "Operation not permitted (EPERM)" in caught.value.detail
        assert config.read_text() == ORIGINAL
        assert os.listdir(tmp_path) == ["sprawl.toml"]
    finally:
        subprocess.run([str(chattr), "-i", str(config)], check=False)


def test_pin_keeps_the_file_mode_and_writes_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text(ORIGINAL)
    os.chmod(real, 0o640)
    link = tmp_path / "sprawl.toml"
    link.symlink_to(real)
    pin("t:1", link, engine_name="docker", resolver=resolver_for({("docker", "t:1"): D1}))
    assert link.is_symlink()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert load_config(real).sandbox.container.image_for("docker") == D1


def test_render_of_an_empty_file_makes_the_table() -> None:
    text, removed = render("", {None: D1}, Path("sprawl.toml"))
    assert (text, removed) == (f'[sandbox.container]\nimage = "{D1}"\n', {})


# --- Dockerfile FROM lines ------------------------------------------------------------


def refs(text: str, **args: str) -> list[tuple[str, int, str]]:
    return [(b.ref, b.line, b.instruction) for b in external_bases(text, args)]


def test_from_scratch_needs_nothing() -> None:
    assert refs("FROM scratch\nCOPY x /x\n") == []
    assert refs("from SCRATCH\n") == []


def test_multi_stage_names_are_not_images() -> None:
    text = (
        "FROM sprawl/busybox:latest AS build\n"
        "RUN echo hi > /out\n"
        "FROM build AS test\n"
        "FROM Build\n"
        "FROM scratch\n"
        "COPY --from=build /out /out\n"
        "COPY --from=0 /out /out2\n"
        "COPY --from=sprawl/debian:bookworm /etc/os-release /\n"
    )
    assert refs(text) == [
        ("sprawl/busybox:latest", 1, "FROM"),
        ("sprawl/debian:bookworm", 8, "COPY --from"),
    ]


def test_arg_before_from_is_expanded_and_overridable() -> None:
    text = (
        "ARG REPO=sprawl\n"
        "ARG TAG=latest\n"
        'ARG FLAVOUR="busybox"\n'
        "FROM ${REPO}/$FLAVOUR:${TAG} AS a\n"
        "ARG TAG=ignored-after-from\n"
        "FROM ${MISSING:-sprawl/debian}:bookworm\n"
        "FROM ${REPO:+localhost/}x\n"
    )
    assert refs(text) == [
        ("sprawl/busybox:latest", 4, "FROM"),
        ("sprawl/debian:bookworm", 6, "FROM"),
        ("localhost/x", 7, "FROM"),
    ]
    assert refs(text, TAG="v2")[0] == ("sprawl/busybox:v2", 4, "FROM")


def test_platform_flag_comments_and_continuations() -> None:
    text = (
        "# syntax=docker/dockerfile:1\n"
        "# a comment\n"
        "FROM --platform=$BUILDPLATFORM \\\n"
        "  # a comment inside the continuation\n"
        "  sprawl/busybox@sha256:" + "ab" * 32 + " \\\n"
        "  AS base\n"
        "RUN true\n"
    )
    assert refs(text) == [("sprawl/busybox@sha256:" + "ab" * 32, 3, "FROM")]


def test_escape_directive_backtick() -> None:
    text = "# escape=`\nFROM `\n  img:1\nRUN dir c:\\\n"
    assert refs(text) == [("img:1", 2, "FROM")]
    assert logical_lines(text) == [(2, "FROM img:1"), (4, "RUN dir c:\\")]


def test_duplicate_bases_listed_once() -> None:
    assert refs("FROM a:1\nFROM a:1\nFROM b:1 AS b\n") == [("a:1", 1, "FROM"), ("b:1", 3, "FROM")]


def test_from_that_expands_to_nothing_is_an_error() -> None:
    with pytest.raises(DockerfileError) as caught:
        external_bases("ARG BASE\nFROM ${BASE}\n")
    assert caught.value.line == 2 and "${BASE}" in str(caught.value)
    with pytest.raises(DockerfileError):
        external_bases("FROM --platform=linux/amd64\n")


class FakeStore(ImageEngine):
    """An engine whose local store is a set; build must never be reached."""

    def resolve(self, ref: str) -> str | None:
        return D1 if ref in {"sprawl/busybox:latest"} else None

    def run(self, args, *, what, stdin=None):  # type: ignore[no-untyped-def]
        raise AssertionError(f"the engine was asked to run {args}")


def test_base_not_local_is_refused_before_any_build(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM sprawl/busybox:latest AS a\nFROM alpine:3.19\nRUN true\n")
    with pytest.raises(SprawlError) as caught:
        FakeStore("docker").build(
            dockerfile, tmp_path, labels={}, tag=None, ulimits={}, on_line=print
        )
    err = caught.value
    assert err.code is ErrorCode.IMAGE_INVALID
    assert err.subject == "FROM alpine:3.19"
    assert f"{dockerfile}:2" in err.detail and "never pulls" in err.detail
    assert err.recovery.startswith("build or import it first: sprawl-orch image build busybox")


def test_local_bases_pass_the_check(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM sprawl/busybox:latest AS a\nFROM scratch\nCOPY --from=a / /\n")
    FakeStore("podman").check_bases(dockerfile)  # no error, no engine run


@pytest.mark.parametrize(
    "text",
    [
        '[sandbox.container]\nimage = "t:1"\n',
        'sandbox.container.image = "t:1"\n',
        '[sandbox]\ncontainer = {image = "t:1", engine = "docker"}\n',
    ],
)
def test_a_per_engine_pin_replaces_the_tag_its_refusal_named(tmp_path: Path, text: str) -> None:
    # Issue 27: `image = "t:1"` is refused with "sprawl-orch image pin t:1"; a pin found in
    # one engine only wrote images.docker beside the tag, and the result was refused too.
    config = tmp_path / "sprawl.toml"
    config.write_text(text)
    result = pin("t:1", config, resolver=resolver_for({("docker", "t:1"): D1}))
    assert result.removed == {"[sandbox.container] image": "t:1"}
    loaded = load_config(config).sandbox.container
    assert (loaded.image, loaded.image_for("docker")) == (None, D1)


def test_every_engine_says_what_it_did(tmp_path: Path) -> None:
    # issue 27, item 15: docker was skipped without a word while podman pinned.
    result = pin("t:1", tmp_path / "sprawl.toml", resolver=resolver_for({("podman", "t:1"): P1}))
    assert result.written == {"[sandbox.container.images] podman": P1}
    assert result.notes == ("docker: t:1 is not a local image there; nothing pinned for docker",)


def test_one_engine_refusing_a_name_refuses_the_pin_naming_every_engine(tmp_path: Path) -> None:
    def resolve(engine: str, ref: str) -> str | None:
        if engine == "podman":
            raise SprawlError(
                ErrorCode.IMAGE_INVALID, f"podman {ref}", "t:1 names more than one image", "pin"
            )
        return D1

    config = tmp_path / "sprawl.toml"
    with pytest.raises(SprawlError) as caught:
        pin("t:1", config, resolver=resolve)
    err = caught.value
    assert err.code is ErrorCode.IMAGE_INVALID
    assert err.detail == (
        f"podman: t:1 names more than one image (docker: t:1 is {D1}); nothing was written"
    )
    assert "--engine" in err.recovery
    assert not config.exists()
