"""`sprawl-orch doctor --json` on this machine: real engines, real bwrap, real cgroups."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from click.testing import CliRunner

from sprawl_orch.cli import main


def test_doctor_reports_this_machine(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(f'[sandbox]\nscratch_dir = "{tmp_path / "scratch"}"\n')
    result = CliRunner().invoke(main, ["doctor", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rows = {row["label"]: row for row in data["arms"]}
    assert set(rows) >= {"container (docker)", "container (podman)", "copied_tree"}
    assert rows["copied_tree"]["available"] is True
    # the python arm's runtime is part of the [test] extra: installed wherever tests run
    assert rows["python"]["available"] is True, rows["python"]["missing"]
    assert rows["python"]["assurances"]["user"] == "no"
    for row in data["arms"]:
        # Every row says either that it works or exactly what is missing and what to do.
        assert row["available"] or all(m["phrase"] and m["recovery"] for m in row["missing"])
    if sys.platform.startswith("linux"):
        native = rows["linux_namespaces"]
        assert native["available"] is (
            shutil.which("bwrap") is not None and "can be created" in native["detail"]
        )
        from sprawl_orch.native_fallbacks.landlock import abi

        landlock = rows["landlock"]
        assert landlock["available"] is (abi() >= 3), landlock
        assert landlock["detail"] == (
            f"Landlock ABI {abi()}" if abi() else "no Landlock in this kernel"
        )
    # auto's answer is one of the rows, and it is said why.
    assert data["auto"]["reason"].startswith("auto resolves to")
    assert data["cgroup"]["detail"]


def test_doctor_says_which_runtime_and_gvisors_kernel(
    tmp_path: Path, docker_image: str, podman_image: str
) -> None:
    """runtime = "runsc" (issue 17): each engine's row says it runs under runsc on gVisor's
    kernel -- or, refused, what to install or register."""
    from sprawl_orch.container.gvisor import KERNEL_NOTE, runsc_path
    from tests.integration.conftest import missing

    if runsc_path() is None:
        missing("runsc is not installed (apt-get install runsc; .ci/setup-engines does)")
    config = tmp_path / "sprawl.toml"
    config.write_text(
        f'[sandbox]\nscratch_dir = "{tmp_path / "scratch"}"\n[sandbox.container]\n'
        f'runtime = "runsc"\n[sandbox.container.images]\ndocker = "{docker_image}"\n'
        f'podman = "{podman_image}"\n[state]\ndir = "{tmp_path / "state"}"\n'
    )
    result = CliRunner().invoke(main, ["doctor", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["label"]: row for row in json.loads(result.output)["arms"]}
    for engine in ("docker", "podman"):
        row = rows[f"container ({engine})"]
        assert row["available"], row["missing"]
        assert "runs under " in row["detail"] and KERNEL_NOTE[1:] in row["detail"]
