"""Five-axis conformance of the host-process arms on this machine (SPEC §15).

Every axis of bwrap, the copied tree and `where = "host"` is observed with real commands
through the ExecTool and read back from the host; the arm's claimed `Assurances` must equal
what was observed on every axis. Seatbelt runs on macOS and the Job Object on Windows (the
acceptance workflow's macos-latest / windows-latest jobs); each test selects itself by
platform. Probes: tests/integration/conformance.py.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from orchestrator.arms import ASSURANCES, ArmName
from orchestrator.assurances import Assurances
from orchestrator.config import Config, parse_config
from orchestrator.exec_tool import ExecTool
from tests.integration.conformance import (
    MiB,
    absent,
    assert_conformance,
    exec_runner,
    observe_all,
    table,
    the_copy,
)
from tests.integration.conformance_dialects import Dialect, PythonDialect, ShDialect

LIMIT = 64 * MiB
LINUX = sys.platform.startswith("linux")
# Windows' socket layer can't load its providers without SystemRoot (WinError 10106), which
# the environment floor doesn't pass: without it the network probe would fail for a reason
# that is not confinement.
PASS = ("SYSTEMROOT",) if sys.platform == "win32" else ()
# The arm alone (without the exec tool) is proven on Windows by test_job_object_arm.py.


def dialects() -> list[pytest.param]:  # type: ignore[valid-type]
    params = [pytest.param(PythonDialect(), id="python")]
    if os.name == "posix" and shutil.which("busybox"):
        # The busybox dialect is what a container image runs; proving it here on the
        # host arms tests the probes the container conformance reuses.
        params.append(pytest.param(ShDialect("busybox "), id="busybox-sh"))
    return params


def config(tmp_path: Path, arm: str) -> Config:
    return parse_config({
        "sandbox": {
            "arm": arm,
            "scratch_dir": str(tmp_path / "scratch"),
            "env_passthrough": list(PASS),
            "container": {"memory_bytes": LIMIT},
        },
        "state": {"dir": str(tmp_path / "state")},
    })


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('hello')\n")
    (tmp_path / "scratch").mkdir()
    return root


def conform(tool: ExecTool, tree: Path, scratch: Path, dialect: Dialect,
            where: str = "sandbox") -> None:
    arm = tool.arm() if where == "sandbox" else None
    claimed: Assurances = arm.assurances() if arm is not None else ASSURANCES[ArmName.HOST]
    name = arm.name.value if arm is not None else "host"
    run = exec_runner(tool, where=where)
    copy = (lambda: the_copy(scratch)) if where == "sandbox" else (lambda: None)
    observed = observe_all(run, dialect, workdir=tree, copy=copy, limit_bytes=LIMIT)
    print(table(name, observed))
    # The result's own statement says the same as the arm's claim.
    stated = tool.exec(list(PythonDialect().write("stated")), where=where)  # type: ignore[arg-type]
    assert stated.confinement is not None
    assert stated.confinement.assurances == {a.value: k.value for a, k in claimed.axes().items()}
    assert_conformance(claimed, observed)


@pytest.mark.skipif(not LINUX, reason="bwrap is the Linux native arm (ubuntu jobs run this)")
@pytest.mark.parametrize("dialect", dialects())
def test_bwrap_conforms(tmp_path: Path, tree: Path, dialect: Dialect) -> None:
    if shutil.which("bwrap") is None:
        absent("bwrap", "not installed (apt-get install bubblewrap)")
    with ExecTool(config(tmp_path, "native"), tree) as tool:
        if tool.choice.arm is not ArmName.LINUX_NAMESPACES:
            absent("the linux_namespaces arm", tool.choice.reason())
        conform(tool, tree, tmp_path / "scratch", dialect)


@pytest.mark.parametrize("dialect", dialects())
def test_copied_tree_conforms(tmp_path: Path, tree: Path, dialect: Dialect) -> None:
    with ExecTool(config(tmp_path, "copied_tree"), tree) as tool:
        assert tool.choice.arm is ArmName.COPIED_TREE
        conform(tool, tree, tmp_path / "scratch", dialect)


@pytest.mark.parametrize("dialect", dialects())
def test_host_conforms_and_its_writes_land(tmp_path: Path, tree: Path, dialect: Dialect) -> None:
    with ExecTool(config(tmp_path, "copied_tree"), tree) as tool:
        conform(tool, tree, tmp_path / "scratch", dialect, where="host")
        # "untouched" is a capability of the sandbox arms, not a command that didn't write.
        tool.exec(list(dialect.write("landed.txt")), where="host")
    assert (tree / "landed.txt").exists()


@pytest.mark.skipif(sys.platform != "darwin", reason="Seatbelt is macOS's (macos-latest job)")
def test_seatbelt_conforms(tmp_path: Path, tree: Path) -> None:
    with ExecTool(config(tmp_path, "native"), tree) as tool:
        if tool.choice.arm is not ArmName.MACOS_SEATBELT:
            absent("the macos_seatbelt arm", tool.choice.reason())
        conform(tool, tree, tmp_path / "scratch", PythonDialect())


@pytest.mark.skipif(sys.platform != "win32", reason="Job Objects are Windows' (windows-latest)")
def test_windows_job_conforms(tmp_path: Path, tree: Path) -> None:
    with ExecTool(config(tmp_path, "native"), tree) as tool:
        if tool.choice.arm is not ArmName.WINDOWS_JOB:
            absent("the windows_job arm", tool.choice.reason())
        conform(tool, tree, tmp_path / "scratch", PythonDialect())
