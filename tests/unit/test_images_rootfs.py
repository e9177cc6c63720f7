"""Recipes, the busybox rootfs and its tar, and `verify` over a fake store. No engine.

The busybox tests read the host's static busybox (busybox-static, installed by
.ci/setup-engines) exactly as `image build busybox` does."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path
from typing import ClassVar

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.images.build import busybox_tar
from sprawl_orch.images.engines import ImageEngine, LocalImage, fixed_id
from sprawl_orch.images.recipe import BusyboxRootfs, DebianRootfs, load_recipe
from sprawl_orch.images.rootfs import _needs_loader, applets, make_busybox, remove_tree, tar_tree
from sprawl_orch.images.verify import verify

D1 = "sha256:" + "d1" * 32
P1 = "sha256:" + "a1" * 32


def test_recipes_are_readable_files() -> None:
    busybox = load_recipe("busybox")
    debian = load_recipe("debian")
    assert isinstance(busybox.rootfs, BusyboxRootfs)
    assert isinstance(debian.rootfs, DebianRootfs)
    assert busybox.source.name == "busybox.toml" and busybox.source.is_file()
    assert (debian.rootfs.suite, debian.rootfs.variant) == ("bookworm", "minbase")
    assert debian.tag_for(suite="trixie") == "sprawl/debian:trixie"
    assert "WORKDIR /work" in busybox.image.changes


def test_unknown_recipe_is_refused() -> None:
    with pytest.raises(SprawlError) as caught:
        load_recipe("alpine")
    assert caught.value.code is ErrorCode.IMAGE_INVALID
    assert "busybox, debian" in caught.value.detail


def test_broken_recipe_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "busybox.toml").write_text('[recipe]\nname = "busybox"\n')
    with pytest.raises(SprawlError) as caught:
        load_recipe("busybox", tmp_path)
    assert caught.value.subject == str(tmp_path / "busybox.toml")


def test_static_check() -> None:
    host = load_recipe("busybox").rootfs
    assert isinstance(host, BusyboxRootfs)
    assert _needs_loader(host.busybox) is None
    # Not `which python3`: under pyenv that is a shell-script shim, not an ELF file.
    dynamic = Path("/bin/ls").resolve()
    assert "dynamically linked" in (_needs_loader(dynamic) or "")


def test_busybox_rootfs_contents(tmp_path: Path) -> None:
    spec = load_recipe("busybox").rootfs
    assert isinstance(spec, BusyboxRootfs)
    root = tmp_path / "rootfs"
    make_busybox(spec, root)
    binary = root / "bin" / "busybox"
    assert binary.is_file() and not binary.is_symlink()
    assert binary.read_bytes() == spec.busybox.read_bytes()
    names = applets(spec.busybox)
    assert "sh" in names and "busybox" not in names
    for name in names:
        assert (root / "bin" / name).readlink() == Path("busybox")
    assert stat.S_IMODE((root / "tmp").stat().st_mode) == 0o1777
    assert (root / "work").is_dir()
    assert "nobody:x:65534:65534:" in (root / "etc" / "passwd").read_text()
    assert "nogroup:x:65534:" in (root / "etc" / "group").read_text()


def test_busybox_tar_is_deterministic(tmp_path: Path) -> None:
    spec = load_recipe("busybox").rootfs
    assert isinstance(spec, BusyboxRootfs)
    tars = []
    for attempt in ("one", "two"):
        make_busybox(spec, tmp_path / attempt)
        tars.append(tar_tree(tmp_path / attempt, spec.mtime))
    assert tars[0] == tars[1]
    with tarfile.open(fileobj=io.BytesIO(tars[0])) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 0)}
    by_name = {m.name: m for m in members}
    assert by_name["bin/sh"].issym() and by_name["bin/sh"].linkname == "busybox"
    assert by_name["bin/busybox"].isfile() and by_name["bin/busybox"].mode == 0o755


def test_busybox_tar_label_names_the_binary() -> None:
    tar, source = busybox_tar(load_recipe("busybox"))
    assert source.startswith("BusyBox v") and "/usr/bin/busybox sha256:" in source
    assert busybox_tar(load_recipe("busybox"))[0] is tar  # made once per process


def test_remove_tree_tolerates_a_missing_dir(tmp_path: Path) -> None:
    remove_tree(tmp_path / "absent")
    (tmp_path / "t" / "a").mkdir(parents=True)
    remove_tree(tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_podman_ids_get_the_prefix() -> None:
    assert fixed_id("a1" * 32 + "\n") == P1
    assert fixed_id(D1) == D1


class FakeEngine(ImageEngine):
    """A local store as a dict; `down` makes the engine unreachable."""

    store: ClassVar[dict[str, dict[str, str]]] = {"docker": {D1: "busybox"}, "podman": {}}
    down: ClassVar[frozenset[str]] = frozenset()

    def resolve(self, ref: str) -> str | None:
        if self.name in self.down:
            raise SprawlError(ErrorCode.TOOL_UNAVAILABLE, self.name, "not running", "start it")
        return ref if ref in self.store[self.name] else None

    def inspect(self, refs):  # type: ignore[no-untyped-def]
        return [
            LocalImage(self.name, r, (), {"sprawl.recipe": self.store[self.name][r]}, "", 0)
            for r in refs
        ]


def test_verify_statuses() -> None:
    config = parse_config({"sandbox": {"container": {"images": {"docker": D1, "podman": P1}}}})
    result = verify(config, factory=FakeEngine)
    rows = {c.engine: (c.status, c.key, c.pinned) for c in result.checks}
    assert rows == {
        "docker": ("present", "[sandbox.container.images] docker", D1),
        "podman": ("missing", "[sandbox.container.images] podman", P1),
    }
    assert not result.ok  # a usable engine's pin is missing
    assert "sprawl-orch image build busybox --engine podman" in result.checks[1].recovery


def test_verify_ok_when_the_used_engine_has_it() -> None:
    config = parse_config({"sandbox": {"container": {"engine": "docker", "image": D1}}})
    result = verify(config, factory=FakeEngine)
    assert [(c.engine, c.used, c.status) for c in result.checks] == [
        ("docker", True, "present"),
        ("podman", False, "missing"),
    ]
    assert result.ok
    assert result.as_dict()["engines"][0]["image"]["labels"] == {"sprawl.recipe": "busybox"}


def test_verify_unpinned_and_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [c.status for c in verify(parse_config({}), factory=FakeEngine).checks] == [
        "unpinned",
        "unpinned",
    ]
    monkeypatch.setattr(FakeEngine, "down", frozenset({"docker"}))
    config = parse_config({"sandbox": {"container": {"image": D1}}})
    result = verify(config, factory=FakeEngine)
    assert [c.status for c in result.checks] == ["unreachable", "missing"]
    assert result.checks[0].detail == "not running"
    assert not result.ok


def test_verify_an_arm_without_images_is_ok_and_says_why(tmp_path: Path) -> None:
    # An outsider's native config got NOT OK (exit 1) and advice to build busybox for a Python
    # project (issue 27, item 12).
    for arm in ("native", "copied_tree"):
        result = verify(parse_config({"sandbox": {"arm": arm}}), factory=FakeEngine)
        assert result.ok and not result.uses_images
        assert not any(c.used for c in result.checks)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    result = verify(parse_config({}), factory=FakeEngine, workdir=tmp_path)
    assert not result.ok
    assert "sprawl-orch image build python --engine docker" in result.checks[0].recovery
