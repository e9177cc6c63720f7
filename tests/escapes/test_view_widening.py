"""The escape suite's view-widening inputs class (issue 30; probes_view.py says what each
scenario plants): one command per scenario, in a tree of its own (a refused venv must not
take the others down), through sprawl-orch on every arm this machine offers, with `raw`
and `host` as the controls -- every scenario must escape on raw, and be admitted on
host and copied_tree (which claim no filesystem axis); an arm claiming filesystem must
keep every secret out (ESCAPED fails the test).

Run as root by CI; test_view_widening_nonroot.py runs it again as an account of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.arms import ASSURANCES, ArmName
from sprawl_orch.core.assurances import Assurances, statement
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes import matrix
from tests.escapes.probe import Verdict
from tests.escapes.probes_view import Scenario, ViewBait, scenarios
from tests.escapes.runner import ArmRun, config_data
from tests.integration.conftest import missing

ARMS = ("raw", "host", "copied_tree", "linux_namespaces", "landlock", "docker", "podman")
TIMEOUT_S = 60.0
WANTED = {
    "host": ArmName.HOST,
    "copied_tree": ArmName.COPIED_TREE,
    "linux_namespaces": ArmName.LINUX_NAMESPACES,
    "landlock": ArmName.LANDLOCK,
    "docker": ArmName.CONTAINER,
    "podman": ArmName.CONTAINER,
}


def _environ(s: Scenario, bait: ViewBait, tree: Path) -> dict[str, str]:
    entries = [e.replace("@TREE@", str(tree)) for e in s.path]
    path = os.pathsep.join([*entries, os.environ.get("PATH", os.defpath)])
    return {**os.environ, **s.env, "HOME": str(bait.home), "PATH": path}


def _data(arm: str, tmp: Path, request: pytest.FixtureRequest) -> dict[str, Any] | None:
    scratch, state = tmp / "scratch", tmp / "state"
    if arm in ("docker", "podman"):
        image = str(request.getfixturevalue(f"{arm}_image"))
        return config_data("container", scratch, state, (arm, image))
    if arm == "linux_namespaces":
        if shutil.which("bwrap") is None:
            missing("bwrap is not installed (apt-get install bubblewrap)")
        return config_data("native", scratch, state)
    if arm == "landlock":  # the same view, read through Landlock rules instead of binds
        data = config_data("native", scratch, state)
        data["sandbox"]["native"] = {"mechanism": "landlock"}
        return data
    return config_data("copied_tree", scratch, state)


def _run_raw(s: Scenario, tree: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["busybox", "sh", "-c", s.sh()],
        cwd=tree,
        env={"PATH": env["PATH"]},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return done.stdout + done.stderr


def run_arm(arm: str, tmp: Path, bait: ViewBait, request: pytest.FixtureRequest) -> ArmRun:
    data = _data(arm, tmp, request) if arm != "raw" else None
    outs: dict[str, str] = {}
    claimed: Assurances = ASSURANCES[ArmName.HOST]
    said = statement("raw", claimed)
    offerings: Offerings | None = None
    for s in scenarios(bait):
        tree = tmp / f"tree-{s.id}"
        tree.mkdir()
        (tree / "a.txt").write_text("original\n")
        s.tree(tree)
        env = _environ(s, bait, tree)
        if data is None:
            outs[s.id] = _run_raw(s, tree, env)
            continue
        data["sandbox"]["env_passthrough"] = sorted(s.env)
        with ExecTool(parse_config(data), tree, environ=env, offerings=offerings) as tool:
            offerings = tool.offerings
            where = "host" if arm == "host" else "sandbox"
            if where == "sandbox" and tool.choice.arm is not WANTED[arm]:
                missing(f"the {arm} arm is not offered here: {tool.choice.reason()}")
            result = tool.exec(
                ["busybox", "sh", "-c", s.sh()],
                where=where,  # type: ignore[arg-type]
                timeout=TIMEOUT_S,
                background_ok=False,
            )
        if result.outcome == "exceptional":
            outs[s.id] = f"REFUSED {result.code} {result.detail}"
            continue
        assert result.outcome == "settled" and result.confinement is not None, result
        claimed = Assurances(**result.confinement.assurances)
        said = result.confinement.statement
        outs[s.id] = result.stdout + "\n" + result.stderr
    name = "raw (no sprawl-orch)" if arm == "raw" else arm
    return ArmRun(name, claimed, said, outs)  # type: ignore[arg-type]


def verdict(s: Scenario, out: str) -> Verdict:
    probe = s.probe()
    seen = s.seen(out)
    if seen is not None:
        return Verdict(probe, "escaped", f"host saw: {seen}")
    if out.startswith("REFUSED E_SANDBOX_DENIED"):
        return Verdict(probe, "blocked", out[:300])
    if f"NOT {s.id}" in out:
        return Verdict(probe, "blocked", "no secret in the output")
    return Verdict(probe, "broken", out[:300] or "no output")


@pytest.mark.parametrize("arm", ARMS)
def test_view_widening_inputs(arm: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    (tmp_path / "scratch").mkdir()
    bait = ViewBait(tmp_path, tmp_path / "state")
    try:
        bait.plant()
        run = run_arm(arm, tmp_path, bait, request)
        verdicts = [verdict(s, run.outputs[s.id]) for s in scenarios(bait)]  # type: ignore[index]
    finally:
        bait.close()
    print(matrix.table([(run, verdicts)]))
    print(matrix.details(run, verdicts))
    if arm in ("raw", "host"):
        undetected = [f"{v.probe.id}: {v.evidence}" for v in verdicts if v.status != "escaped"]
        assert not undetected, f"these probes could not see an escape on the {arm} control"
    assert not matrix.failures(run, verdicts), "\n".join(matrix.failures(run, verdicts))
