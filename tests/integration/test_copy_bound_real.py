"""The file bound refuses before copying on every Linux arm (issue 27 item 5): a first
command in a tree just over `[sandbox.copy] max_files` used to copy bound + 1 files and
delete them before E_COPY_BOUND (52-146 s at the default 100 000 by arm); now the count
before the copy refuses it (copy.bounds.count_files) and the scratch holds no copy after."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing

BOUND = 300


@pytest.mark.parametrize("arm", ["docker", "podman", "linux_namespaces", "copied_tree"])
def test_a_tree_over_the_file_bound_is_refused_before_it_is_copied(
    arm: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tree = tmp_path / "tree"
    for i in range(BOUND + 1):
        d = tree / f"d{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_text("x")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    sandbox: dict[str, object] = {"scratch_dir": str(scratch), "copy": {"max_files": BOUND}}
    if arm in ("docker", "podman"):
        image = str(request.getfixturevalue(f"{arm}_image"))
        sandbox.update(arm="container", container={"engine": arm, "images": {arm: image}})
    else:
        sandbox["arm"] = "native" if arm == "linux_namespaces" else "copied_tree"
    config = parse_config({"sandbox": sandbox, "state": {"dir": str(tmp_path / "state")}})
    with ExecTool(config, tree) as tool:
        want = "container" if arm in ("docker", "podman") else arm
        if tool.choice.arm.value != want:
            missing(f"the {arm} arm is not available here (chose {tool.choice.arm.value})")
        result = tool.exec(["true"])
    assert (result.outcome, result.code) == ("exceptional", ErrorCode.COPY_BOUND), result
    assert result.detail is not None
    assert f"{BOUND + 1} reached by counting, before anything was copied" in result.detail
    left = [os.path.join(here, f) for here, _d, files in os.walk(scratch) for f in files]
    assert not [p for p in left if os.path.basename(p).startswith("f")], left
