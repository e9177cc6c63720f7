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
    for row in data["arms"]:
        # Every row says either that it works or exactly what is missing and what to do.
        assert row["available"] or all(m["phrase"] and m["recovery"] for m in row["missing"])
    if sys.platform.startswith("linux"):
        native = rows["linux_namespaces"]
        assert native["available"] is (shutil.which("bwrap") is not None
                                       and "can be created" in native["detail"])
    # auto's answer is one of the rows, and it is said why.
    assert data["auto"]["reason"].startswith("auto resolves to")
    assert data["cgroup"]["detail"]
