"""The `windows_job` arm by itself on a plain copy: the Job Object + AppContainer mechanism
proven on windows-latest with the shared five-axis probes, independent of the exec tool's
synced copy. This module imports nothing POSIX-only, so it loads on Windows."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from sprawl_orch.config import ContainerConfig
from sprawl_orch.core.assurances import Guarantee, Kept
from sprawl_orch.core.environment import child_env
from tests.integration.conformance import (
    MiB,
    absent,
    arm_runner,
    assert_conformance,
    observe_all,
    table,
)
from tests.integration.conformance_dialects import Dialect, PythonDialect

LIMIT = 64 * MiB
# Windows' socket layer can't load its providers without SystemRoot (WinError 10106).
PASS = ("SYSTEMROOT",)

pytestmark = pytest.mark.skipif(
    sys.platform != "win32", reason="AppContainers and Job Objects are Windows' own"
)


def test_windows_job_arm_conforms_by_itself(tmp_path: Path) -> None:
    from sprawl_orch.native_fallbacks.job_object import JobObjectArm, job_available

    ok, why = job_available()
    if not ok:
        absent("the windows_job arm", why)
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "main.py").write_text("print('hello')\n")
    copy = tmp_path / "scratch" / "copy"
    shutil.copytree(tree, copy)
    arm = JobObjectArm(ContainerConfig(memory_bytes=LIMIT))
    dialect: Dialect = PythonDialect()
    try:
        arm.prepare(tree)
        run = arm_runner(arm, copy, child_env(os.environ, PASS), tmp_path / "outputs")
        observed = observe_all(run, dialect, workdir=tree, copy=lambda: copy, limit_bytes=LIMIT)
    finally:
        arm.close()
    print(table("windows_job", observed))
    assert observed[Guarantee.FILESYSTEM].kept is Kept.YES
    assert_conformance(arm.assurances(), observed)
