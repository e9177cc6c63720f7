"""Inputs that shape the sandbox (shaping.py, issue 30): each case on each arm it concerns,
through ExecTool, and once as a raw control with nothing of sprawl-orch in the way.

- control: the planted input must show its effect (a planted program ran, a file reached the
  host's /dev/shm, the caller's secret was printed, ...), or the case proves nothing;
- each arm row: no host evidence of that effect. A refusal (E_SANDBOX_DENIED,
  E_CONFIG_INVALID) is an arm's answer where the case allows it; an arm other than the row's
  is a missing arm (a failure in CI).

Known breaks not fixed here are strict xfails naming the break, so the fix turns them green.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.runner import config_data, landlock_data
from tests.escapes.shaping import CONTAINERS, TIMEOUT_S, Case, Scene, shm_file
from tests.escapes.shaping_cases import CASES, REFUSED_LEAVES_TREE
from tests.integration.conftest import busybox_rootfs_tar, missing, remove_image

ARM_OF = {
    "copied_tree": "copied_tree",
    "linux_namespaces": "linux_namespaces",
    "landlock": "landlock",
    "docker": "container",
    "podman": "container",
}
REFUSALS = (ErrorCode.SANDBOX_DENIED.value, ErrorCode.CONFIG_INVALID.value)


def volume_image(engine: str) -> str:
    """The busybox test image with `VOLUME /data`: an engine-made host directory."""
    with tempfile.TemporaryDirectory(prefix="sprawl-volume-") as tmp:
        tar = busybox_rootfs_tar(Path(tmp))
        done = subprocess.run(
            [engine, "import", "--change", "VOLUME /data", str(tar)],
            capture_output=True,
            text=True,
            check=True,
        )
    raw = done.stdout.strip().splitlines()[-1]
    return raw if raw.startswith("sha256:") else f"sha256:{raw}"


@pytest.fixture(scope="module")
def volume_images(docker_image: str, podman_image: str) -> Iterator[dict[str, str]]:
    made = {f"{e}-volume": volume_image(e) for e in CONTAINERS}
    try:
        yield made
    finally:
        for key, image in made.items():
            remove_image(key.removesuffix("-volume"), image)


def images(case: Case, row: str, request: pytest.FixtureRequest) -> dict[str, str]:
    out: dict[str, str] = {}
    for engine in CONTAINERS:
        if engine in case.rows and row in (engine, "control"):
            out[engine] = str(request.getfixturevalue(f"{engine}_image"))
    if case.id == "image-declares-a-volume":
        out.update(request.getfixturevalue("volume_images"))
    return out


@contextlib.contextmanager
def scene_for(case: Case, row: str, tmp: Path, request: pytest.FixtureRequest) -> Iterator[Scene]:
    if case.root_only and os.geteuid() != 0:
        pytest.skip("a set-uid root file can be planted by root only (CI runs as root)")
    tree = tmp / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("original\n")
    # Outside tmp_path (0700): the planted programs may run as the sandbox uid.
    out = Path(tempfile.mkdtemp(prefix="sprawl-shaping-", dir="/tmp"))
    out.chmod(0o1777)
    scene = Scene(tmp, tree, secrets.token_hex(6), out, images(case, row, request))
    (tmp / "scratch").mkdir()
    if row != "control":
        engine = (row, scene.images[row]) if row in CONTAINERS else None
        arm = "container" if engine else ("native" if row == "linux_namespaces" else row)
        scene.data = config_data(arm, tmp / "scratch", tmp / "state", engine)
        if row == "landlock":
            scene.data = landlock_data(tmp / "scratch", tmp / "state")
    try:
        case.plant(scene)
        yield scene
    finally:
        for undo in scene.cleanup:
            undo()
        shutil.rmtree(out, ignore_errors=True)
        shm_file(scene).unlink(missing_ok=True)


def run_row(scene: Scene, case: Case, row: str, monkeypatch: pytest.MonkeyPatch) -> str:
    if row == "linux_namespaces" and shutil.which("bwrap") is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    for key, value in scene.env.items():
        monkeypatch.setenv(key, value)
    if scene.chdir:
        monkeypatch.chdir(scene.tree)
    text = case.sh.format(tok=scene.tok, secret=scene.secret)
    said = exec_cli(scene, text) if case.cli else exec_api(scene, text)
    if said["outcome"] == "exceptional":
        if not (case.refusal_ok and said["code"] in REFUSALS):
            raise AssertionError(f"{case.id} on {row}: not run and not refused: {said}")
        return f"REFUSED {said['code']}: {said['detail']}"
    if said["arm"] != ARM_OF[row]:
        missing(f"the {row} arm is not offered here: it ran on {said['arm']}")
    assert said["outcome"] == "settled", said
    return str(said["stdout"]) + str(said["stderr"])


def exec_api(scene: Scene, text: str) -> dict[str, Any]:
    try:
        environ = {**os.environ, **scene.tool_env}
        with ExecTool(parse_config(scene.data), scene.tree, environ=environ) as tool:
            result = tool.exec(["sh", "-c", text], timeout=TIMEOUT_S, background_ok=False)
    except SprawlError as err:  # the tool refused its place: the API's refusal
        return {"outcome": "exceptional", "code": err.code.value, "detail": err.detail}
    return result.as_json_dict()


def exec_cli(scene: Scene, text: str) -> dict[str, Any]:
    config = scene.tmp / "sprawl.toml"
    config.write_text(tomlkit.dumps(scene.data))
    cli = Path(sys.executable).with_name("sprawl-orch")
    argv = [str(cli), "exec", "--json", "--config", str(config), "-C", str(scene.tree)]
    done = subprocess.run(
        [*argv, "--", "sh", "-c", text],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 60,
        check=False,
        env={**os.environ, **scene.env},
    )
    said: dict[str, Any] = json.loads(done.stdout)
    return said


def judge(case: Case, row: str, tmp: Path, request: pytest.FixtureRequest) -> str | None:
    monkeypatch = request.getfixturevalue("monkeypatch")
    with scene_for(case, row, tmp, request) as scene:
        if row == "control":
            out = case.control(scene)
            seen = case.seen(scene, out)
            assert seen is not None, f"{case.id}: the raw control shows nothing:\n{out}"
            return seen
        out = run_row(scene, case, row, monkeypatch)
        print(f"{case.id} on {row}: {out[:400]}")
        return case.seen(scene, out)


ROWS = [
    pytest.param(
        c,
        r,
        id=f"{c.id}-{r}",
        marks=[pytest.mark.xfail(strict=True, reason=c.xfail)]
        if c.xfail and r != "control"
        else [],
    )
    for c in CASES
    for r in ("control", *c.rows)
]


@pytest.mark.parametrize(("case", "row"), ROWS)
def test_shaping(case: Case, row: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    seen = judge(case, row, tmp_path, request)
    if row != "control":
        assert seen is None, f"ESCAPED {case.id} on {row}: {seen}"


def test_refusal_control(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    judge(REFUSED_LEAVES_TREE, "control", tmp_path, request)


def test_refused_command_leaves_the_tree_unchanged(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seen = judge(REFUSED_LEAVES_TREE, "linux_namespaces", tmp_path, request)
    assert seen is None, seen


DEEP = (
    "cd /tmp; i=0; while [ $i -lt 1500 ]; do mkdir d && cd d || break; i=$((i+1)); done; "
    "echo {tok} > marker-{tok}; echo depth $i"
)


@pytest.mark.parametrize("engine", CONTAINERS)
def test_warm_reset_of_a_deep_tmp(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Warm mode: a command nesting 1500 directories in /tmp made ExecTool.exec raise
    RecursionError out of the reset (os.walk and shutil.rmtree recurse in Python 3.11);
    the reset now walks and removes by fd, and the next command sees nothing of it."""
    image = str(request.getfixturevalue(f"{engine}_image"))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "scratch").mkdir()
    data = config_data("container", tmp_path / "scratch", tmp_path / "state", (engine, image))
    data["sandbox"]["container"]["warm"] = True
    tok = secrets.token_hex(6)
    with ExecTool(parse_config(data), tree) as tool:
        first = tool.exec(["sh", "-c", DEEP.format(tok=tok)], timeout=TIMEOUT_S)
        assert first.outcome == "settled", first.as_json_dict()
        assert "depth 1500" in first.stdout, first.as_json_dict()
        look = f"find / -xdev -name marker-{tok} 2>/dev/null | wc -l"
        second = tool.exec(["sh", "-c", look], timeout=TIMEOUT_S)
    assert second.outcome == "settled", second.as_json_dict()
    assert second.stdout.strip() == "0", f"the first command's file outlived it: {second.stdout}"
