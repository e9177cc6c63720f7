"""The escape suite (design §15, issue #11): every probe of every class, through sprawl-orch,
on every arm this machine offers; `raw` and `where: host` are the controls.

- raw (no sprawl-orch): every applicable probe MUST escape -- a probe that can't get out
  with nothing in its way proves nothing when it fails inside a sandbox;
- host: every probe must escape except those sprawl-orch closes for every arm (inherited
  fds, the terminal), and every escape must be admitted by the host statement;
- each sandbox arm: no escape on an axis it claims (ESCAPED), and every escape on an axis
  it doesn't claim already admitted by its statement (else UNSTATED).

The matrix is printed and written to build/escape-matrix.md (SPRAWL_ESCAPE_MATRIX).
Probe registry: probes_net.py, probes_sock.py, probes_proc.py, probes_fs.py, probes_priv.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sprawl_orch.container.gvisor import runsc_path
from sprawl_orch.core.arms import ArmName
from tests.escapes import matrix
from tests.escapes.bait import Bait
from tests.escapes.probe import Probe, Verdict, judge
from tests.escapes.probes_fs import probes as fs_probes
from tests.escapes.probes_net import probes as net_probes
from tests.escapes.probes_priv import probes as priv_probes
from tests.escapes.probes_proc import probes as proc_probes
from tests.escapes.probes_sock import probes as sock_probes
from tests.escapes.probes_sock import values as sock_values
from tests.escapes.runner import (
    ArmRun,
    config_data,
    open_tool,
    python_for_probes,
    run_raw,
    run_tool,
)
from tests.integration.conftest import missing

PROBES: list[Probe] = [
    *net_probes(),
    *sock_probes(),
    *proc_probes(),
    *fs_probes(),
    *priv_probes(),
]
# "-runsc": the container arm with runtime = "runsc" (gVisor's kernel; issue 17); "-warm":
# warm mode (docs/warm.md), so the plant, battery and exhaust steps are execs into one kept
# container and what one step leaves must not reach the next; "docker-userns": the second
# dockerd, started with --userns-remap=default (issue 30 found AF_VSOCK open there too)
ARMS = (
    "raw",
    "host",
    "copied_tree",
    "linux_namespaces",
    "landlock",
    "docker",
    "podman",
    "docker-runsc",
    "podman-runsc",
    "docker-warm",
    "podman-warm",
    "docker-userns",
)


def test_probe_ids_are_unique() -> None:
    ids = [p.id for p in PROBES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def make_tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "apply-d").mkdir()  # an empty directory a command turns into a link
    for name in ("a.txt", "b.txt", "keep.txt", "sub/c.txt", "poison.txt"):
        (tree / name).write_text("original\n")
    return tree


def run_arm(arm: str, tree: Path, tmp: Path, bait: Bait, request: pytest.FixtureRequest) -> ArmRun:
    scratch, state = tmp / "scratch", tmp / "state"
    if arm == "raw":
        return run_raw(bait, PROBES, tree, tmp)
    engine, _, variant = arm.partition("-")
    runtime = variant if variant == "runsc" else ""
    if engine in ("docker", "podman"):
        if runtime and runsc_path() is None:
            missing("runsc is not installed (apt-get install runsc; .ci/setup-engines does)")
        if variant == "userns":  # the second dockerd, --userns-remap=default (.ci/env)
            env, image = request.getfixturevalue("docker_userns")
        else:
            image = str(request.getfixturevalue(f"{engine}_image"))
        data = config_data("container", scratch, state, (engine, image), runtime or None)
        if variant == "userns":
            data["sandbox"]["container"]["docker_host"] = env["DOCKER_HOST"]
        if variant == "warm":
            data["sandbox"]["container"]["warm"] = True
    elif arm == "linux_namespaces":
        if shutil.which("bwrap") is None:
            missing("bwrap is not installed (apt-get install bubblewrap)")
        data = config_data("native", scratch, state)
    elif arm == "landlock":
        # Forced by the mechanism switch, never by a machine-wide sysctl other suites need.
        data = config_data("native", scratch, state)
        data["sandbox"]["native"] = {"mechanism": "landlock"}
    else:
        data = config_data("copied_tree", scratch, state)
    with open_tool(data, tree) as tool:
        if arm == "host":
            return run_tool(bait, PROBES, tool, "host")
        wanted = {
            "docker": ArmName.CONTAINER,
            "podman": ArmName.CONTAINER,
            "linux_namespaces": ArmName.LINUX_NAMESPACES,
            "landlock": ArmName.LANDLOCK,
            "copied_tree": ArmName.COPIED_TREE,
        }[engine]
        if tool.choice.arm is not wanted:
            missing(f"the {arm} arm is not offered here: {tool.choice.reason()}")
        return run_tool(bait, PROBES, tool, "sandbox")


@pytest.mark.parametrize("arm", ARMS)
def test_escapes(
    arm: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    matrix_rows: list[tuple[ArmRun, list[Verdict]]],
) -> None:
    tree = make_tree(tmp_path)
    (tmp_path / "scratch").mkdir()
    bait = Bait(tree, tmp_path / "scratch", tmp_path / "state")
    try:
        bait.plant_dirs()
        bait.plant_listeners()
        bait.start_podman_service()
        bait.start_sleepers()
        bait.plant_tree()
        bait.add_key()
        bait.values["PY"] = python_for_probes()
        bait.values.update(sock_values())  # the socket families this kernel gives us
        run = run_arm(arm, tree, tmp_path, bait, request)
        out = run.output()
        verdicts = [judge(p, bait, out) for p in PROBES]
    finally:
        bait.close()
    matrix_rows.append((run, verdicts))
    print(matrix.table([(run, verdicts)]))
    print(*(line for line in out.splitlines() if line.startswith("APPLY")), sep="\n")
    print(matrix.details(run, verdicts))
    assert "DONE" in run.outputs["battery"], f"the battery did not finish:\n{run.outputs}"
    if arm in ("raw", "host"):
        undetected = [
            f"{v.probe.id}: {v.evidence}"
            for v in verdicts
            if v.status == "blocked" and not (arm == "host" and v.probe.orchestrator_closes)
        ]
        assert not undetected, f"these probes could not see an escape on the {arm} control"
    assert not matrix.failures(run, verdicts), "\n".join(matrix.failures(run, verdicts))
