"""Runs one arm's steps (plant, edit, battery, exhaust) and returns what the arm claimed,
its statement and each step's output.

Every arm but `raw` goes through sprawl-orch's ExecTool. `raw` is the bare control: the
same scripts as a plain subprocess of this test, with the bait fds inherited and a
terminal as stdin -- what a command gets when nothing confines it. It proves each probe
*can* see an escape, including those sprawl-orch closes even for `where: host`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sprawl_orch.config import parse_config
from sprawl_orch.core.arms import ASSURANCES, ArmName
from sprawl_orch.core.assurances import Assurances, statement
from sprawl_orch.runs.results import ExecResult
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.bait import ESC_FDS, Bait
from tests.escapes.probe import Probe, Step, script
from tests.escapes.probes_fs import edit_source
from tests.escapes.probes_priv import LIMIT_BYTES, LIMIT_PIDS

STEPS: tuple[Step, ...] = ("plant", "battery", "exhaust")


def scripts(probes: list[Probe], step: Step, values: dict[str, str]) -> list[str]:
    """The step's commands: one for plant and battery; one per probe for exhaust, so that
    what one exhaustion leaves charged (tmpfs pages, stray processes) can't take the next
    probe down with it and pass for a limit."""
    if step != "exhaust":
        return [script(probes, step, values)]
    return [script([p], step, values) for p in probes if p.step == "exhaust"]


TIMEOUT_S = 120.0
APPLY_PATHS = [
    "link-abs",
    "link-dir",
    "link-dir/applied",
    "link-out-new",
    "apply-up",
    "apply-via",
    "apply-d",
    "apply-via2",
    "hard-mode",
]


@dataclass
class ArmRun:
    arm: str
    claimed: Assurances
    statement: str
    outputs: dict[Step, str]

    def output(self) -> str:
        return "\n".join(self.outputs.values())


def config_data(
    arm: str,
    scratch: Path,
    state: Path,
    engine: tuple[str, str] | None = None,
    runtime: str | None = None,
) -> dict[str, Any]:
    sandbox: dict[str, Any] = {
        "arm": arm,
        "scratch_dir": str(scratch),
        "container": {"memory_bytes": LIMIT_BYTES, "pids": LIMIT_PIDS},
    }
    if engine is not None:
        name, image = engine
        sandbox["container"].update({"engine": name, "images": {name: image}})
        if runtime is not None:
            sandbox["container"]["runtime"] = runtime
    return {"sandbox": sandbox, "state": {"dir": str(state)}}


def landlock_data(scratch: Path, state: Path) -> dict[str, Any]:
    """The native arm forced onto its landlock mechanism by `[sandbox.native] mechanism`:
    never by flipping the machine's user-namespace sysctl, which the bwrap rows of suites
    running at the same time depend on. A named mechanism is that one or E_SANDBOX_DENIED."""
    data = config_data("native", scratch, state)
    data["sandbox"]["native"] = {"mechanism": "landlock"}
    return data


def python_for_probes() -> str:
    # The interpreter itself, not the venv's link (a venv under /tmp is hidden by a
    # sandbox's private /tmp); the helpers need only the standard library.
    return os.path.realpath(sys.executable)


def run_raw(bait: Bait, probes: list[Probe], tree: Path, outputs: Path) -> ArmRun:
    outs: dict[Step, str] = {}
    bait.open_fds()
    leader, follower = os.openpty()
    try:
        for step in STEPS:
            if step == "battery":
                edit_source(bait.values)
            out = outputs / f"raw-{step}.out"
            with open(out, "wb") as f:
                for text in scripts(probes, step, bait.values):
                    subprocess.run(
                        ["busybox", "sh", "-c", text],
                        cwd=tree,
                        env={"PATH": os.environ["PATH"]},
                        stdin=follower,
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        pass_fds=ESC_FDS,
                        timeout=TIMEOUT_S,
                        check=False,
                    )
            outs[step] = out.read_text(errors="replace")
    finally:
        os.close(leader)
        os.close(follower)
    none = ASSURANCES[ArmName.HOST]
    return ArmRun("raw (no sprawl-orch)", none, statement("raw", none), outs)


def run_tool(bait: Bait, probes: list[Probe], tool: ExecTool, where: str) -> ArmRun:
    outs: dict[Step, str] = {}
    claimed: Assurances | None = None
    said = ""
    bait.open_fds()  # held by the caller while sprawl-orch starts the command
    if where == "sandbox":
        bait.values["APPLY"] = "1"  # a copy whose changes can be applied
    for step in STEPS:
        if step == "battery":
            edit_source(bait.values)
        outs[step] = ""
        for text in scripts(probes, step, bait.values):
            result = tool.exec(
                ["busybox", "sh", "-c", text],
                where=where,  # type: ignore[arg-type]
                timeout=TIMEOUT_S,
                background_ok=False,
            )
            if result.outcome != "settled" or result.confinement is None:
                raise AssertionError(f"the {step} step was not run: {result.as_json_dict()}")
            claimed = Assurances(**result.confinement.assurances)
            said = result.confinement.statement
            outs[step] += result.stdout + "\n" + result.stderr
            if step == "battery" and where == "sandbox":
                outs[step] += "\n" + apply_all(tool, result)
    assert claimed is not None
    name = "host" if where == "host" else tool.arm().name.value
    if tool.choice.arm is ArmName.CONTAINER and where != "host":
        container = tool.config.sandbox.container
        runtime = f", {container.runtime}" if container.runtime else ""
        warm = ", warm" if container.warm else ""
        host = f", {container.docker_host}" if container.docker_host else ""
        name = f"container ({container.engine}{runtime}{warm}{host})"
    return ArmRun(name, claimed, said, outs)


def apply_all(tool: ExecTool, result: ExecResult) -> str:
    """The person keeps what the apply probes changed (only those paths: the other probes'
    writes in the copy would land too, as apply means them to)."""
    if result.changes is None or result.changes.handle is None:
        raise AssertionError(f"the battery's result has no changes to apply: {result.changes}")
    applied = tool.apply(result.changes.handle, APPLY_PATHS)
    return (
        f"APPLY {len(applied.applied)} applied, {len(applied.refused)} refused: "
        + "; ".join(f"{i.path} ({i.change}: {i.why})" for i in applied.refused)[:900]
    )


def open_tool(data: dict[str, Any], tree: Path) -> ExecTool:
    return ExecTool(parse_config(data), tree)
