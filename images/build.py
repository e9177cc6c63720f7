"""`image build`: make a rootfs from a recipe (or build a Dockerfile), import it into each
engine, and return the fixed IDs. Long steps report through a `Steps` (the CLI shows them
with rich; the library default is silent)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from sprawl_orch.config import ContainerConfig
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.images import apt_sources, rootfs
from sprawl_orch.images.engines import (
    LABEL_DATE,
    LABEL_RECIPE,
    LABEL_SOURCE,
    ImageEngine,
    engine,
)
from sprawl_orch.images.recipe import BusyboxRootfs, DebianRootfs, Recipe, load_recipe, read_recipe


class Steps(Protocol):
    """Reports long steps: `with steps.step("debootstrap bookworm") as line: line("I: …")`."""

    def step(self, name: str) -> AbstractContextManager[Callable[[str], None]]: ...


class QuietSteps:
    @contextmanager
    def step(self, name: str) -> Iterator[Callable[[str], None]]:
        yield lambda line: None


QUIET = QuietSteps()


@dataclass(frozen=True)
class Built:
    """What one `image build` made: the tag it set (None: untagged) and {engine: fixed ID}."""

    tag: str | None
    ids: dict[str, str]


def now_label() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def labels_for(recipe: str, source: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        **(extra or {}),
        LABEL_RECIPE: recipe,
        LABEL_DATE: now_label(),
        LABEL_SOURCE: source,
    }


def pick_engines(choice: str | None) -> list[str]:
    """`None`: every engine that answers (at least one); "all": both, each must answer;
    a name: that one."""
    if choice == "all":
        return list(ENGINES)
    if choice is not None:
        return [engine(choice).name]
    reachable: list[str] = []
    reasons: list[str] = []
    for name in ENGINES:
        try:
            ImageEngine(name).server_version()
            reachable.append(name)
        except SprawlError as err:
            reasons.append(f"{name}: {err.detail}")
    if not reachable:
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            subject="docker, podman",
            detail="no engine answers: " + "; ".join(reasons),
            recovery="bash .ci/setup-engines && . .ci/env (starts dockerd, installs podman)",
        )
    return reachable


# The busybox tar is the same bytes for the same binary and recipe, so one process (a test
# session importing into both engines many times) makes it once.
_TARS: dict[tuple[object, ...], tuple[bytes, str]] = {}


def busybox_tar(recipe: Recipe) -> tuple[bytes, str]:
    """(deterministic tar, sprawl.source label) for the busybox recipe."""
    spec = recipe.rootfs
    assert isinstance(spec, BusyboxRootfs)
    try:
        binary = spec.busybox.stat()
        key: tuple[object, ...] = (
            spec.model_dump_json(),
            binary.st_ino,
            binary.st_size,
            binary.st_mtime_ns,
        )
    except OSError:
        key = ()  # busybox_info below explains the missing binary
    if key and key in _TARS:
        return _TARS[key]
    banner, digest = rootfs.busybox_info(spec.busybox)
    with tempfile.TemporaryDirectory(prefix="sprawl-busybox-") as tmp:
        root = Path(tmp) / "rootfs"
        rootfs.make_busybox(spec, root)
        tar = rootfs.tar_tree(root, spec.mtime)
    _TARS[key] = (tar, f"{banner} {spec.busybox} sha256:{digest}")
    return _TARS[key]


def build_busybox(engine: str, *, tag: str | None = None, steps: Steps = QUIET) -> str:
    """Make the busybox image in `engine` ("docker" or "podman"); return its fixed ID.

    ~0.2 s. The layer is the same bytes every time; the ID differs per import (the engine
    stamps the creation time) and per engine.
    """
    return build_recipe("busybox", [engine], tag=tag, steps=steps).ids[engine]


def build_recipe(
    name: str | Path,
    engines: Sequence[str],
    *,
    suite: str | None = None,
    mirror: str | None = None,
    include: Sequence[str] = (),
    tag: str | None = None,
    steps: Steps = QUIET,
) -> Built:
    """Make a recipe's rootfs once and import it into every engine. `name` is a built-in
    recipe ("busybox", "debian", "python") or the Path of an admin's own recipe file;
    `include` adds packages to a debootstrap recipe's `include`."""
    recipe = read_recipe(name) if isinstance(name, Path) else load_recipe(name)
    handles = [engine(e) for e in engines]
    spec = recipe.rootfs
    if isinstance(spec, BusyboxRootfs):
        if include:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                subject=f"--include {','.join(include)}",
                detail=f"recipe {recipe.name} ({recipe.source}) copies the host's busybox; "
                "it installs no packages",
                recovery="use --include with a debootstrap recipe (debian, python, or your own)",
            )
        with steps.step("busybox rootfs"):
            tar, source = busybox_tar(recipe)
        image_tag = tag or recipe.tag_for()
        return Built(image_tag, _import_all(handles, tar, recipe, source, image_tag, steps))
    assert isinstance(spec, DebianRootfs)
    packages = tuple(dict.fromkeys([*spec.include, *include]))
    spec = spec.model_copy(update={"include": packages})
    suite = suite or spec.suite
    mirror = mirror or spec.mirror
    if mirror == "apt":
        found = apt_sources.debian_mirror(suite)
        if found is None:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                subject=f'recipe {recipe.name}: mirror = "apt"',
                detail=f"apt's sources ({apt_sources.APT}/sources.list, sources.list.d) name no "
                f"enabled deb source serving {suite!r} and no Debian archive",
                recovery="name the mirror: sprawl-orch image build … --mirror URL",
            )
        mirror = found
    image_tag = tag or recipe.tag_for(suite=suite)
    with_packages = f" --include={','.join(packages)}" if packages else ""
    source = f"debootstrap --variant={spec.variant}{with_packages} {suite} {mirror}"
    work = Path(tempfile.mkdtemp(prefix="sprawl-debian-", dir=_big_tmp()))
    try:
        root = work / "rootfs"
        with steps.step(f"debootstrap {suite}") as line:
            rootfs.make_debian(spec, root, suite, mirror, line)
        tar_path = work / "rootfs.tar"
        with steps.step("tar rootfs"):
            rootfs.tar_file(root, tar_path)
        with steps.step("remove the rootfs directory"):
            rootfs.remove_tree(root)
        return Built(image_tag, _import_all(handles, tar_path, recipe, source, image_tag, steps))
    finally:
        rootfs.remove_tree(work)


def _big_tmp() -> str:
    # /tmp is often a small tmpfs; a debian rootfs and its tar need ~400 MB of disk.
    return os.environ.get("TMPDIR") or "/var/tmp"


def _import_all(
    handles: Sequence[ImageEngine],
    tar: bytes | Path,
    recipe: Recipe,
    source: str,
    tag: str,
    steps: Steps,
) -> dict[str, str]:
    labels = labels_for(recipe.name, source, recipe.labels)
    ids: dict[str, str] = {}
    for handle in handles:
        with steps.step(f"{handle.name} import"):
            ids[handle.name] = handle.import_tar(
                tar, labels=labels, changes=recipe.image.changes, tag=tag
            )
    return ids


def build_dockerfile(
    dockerfile: Path,
    engines: Sequence[str],
    *,
    tag: str | None = None,
    context: Path | None = None,
    ulimits: Mapping[str, str] | None = None,
    network: str = "none",
    steps: Steps = QUIET,
) -> Built:
    """Build `dockerfile` in each engine without pulling; every FROM base must be local in
    that engine first (refused before any build starts otherwise). `network`: the RUN
    steps' network, "none" or "host" (the private dockerd has no bridge, so "host" is the
    one that reaches a package mirror there)."""
    if network not in ("none", "host"):
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            subject=f"network {network}",
            detail=f"{network!r} is not a build network (accepted: none, host)",
            recovery="build with --network none (default) or --network host",
        )
    dockerfile = dockerfile.resolve()
    handles = [engine(e) for e in engines]
    for handle in handles:
        handle.check_bases(dockerfile)
    labels = labels_for("dockerfile", str(dockerfile))
    limits = dict(ulimits if ulimits is not None else ContainerConfig().ulimits)
    ids: dict[str, str] = {}
    for handle in handles:
        with steps.step(f"{handle.name} build") as line:
            ids[handle.name] = handle.build(
                dockerfile,
                context or dockerfile.parent,
                labels=labels,
                tag=tag,
                ulimits=limits,
                on_line=line,
                network=network,
            )
    return Built(tag, ids)
