"""The person deletes a directory in which the agent changed a file, through the real CLI on
the native arm (linux_namespaces): the agent's next command sees the person's deletion
around its own change, `workspace show` lists only the agent's change (a conflict), and no
`apply --workspace` -- plain, or naming the directory or a deleted file -- brings the
person's deleted files back; naming the agent's file applies it alone. The flow-in judged
the directory whole: every file of it was listed as created by the agent and `apply
--workspace w d/b` wrote the person's deleted file back (tests/unit/test_workspace_three_way.py
holds the neighbours and the kills)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import missing

ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    proj = tmp_path / "proj"
    (proj / "d" / "sub").mkdir(parents=True)
    (proj / "README").write_text("readme\n")
    (proj / "d" / "a").write_text("person a\n")
    (proj / "d" / "b").write_text("person b\n")
    (proj / "d" / "sub" / "x").write_text("person x\n")
    (tmp_path / "scratch").mkdir()
    config = tmp_path / "sprawl.toml"
    config.write_text(
        f'[sandbox]\nscratch_dir = "{tmp_path / "scratch"}"\narm = "native"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    return proj, config


def files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "/" if p.is_dir() else p.read_text()
        for p in sorted(root.rglob("*"))
    }


def cli(proj: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cut = 2 if args[0] == "workspace" else 1  # -C and --config belong to the subcommand
    argv = ["sprawl-orch", *args[:cut], "-C", str(proj), "--config", str(config), *args[cut:]]
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300)


def ex(proj: Path, config: Path, line: str) -> dict[str, object]:
    done = cli(proj, config, "exec", "--json", "--workspace", "w", "--shell", "--", line)
    assert done.stdout, done.stderr
    result = dict(json.loads(done.stdout))
    if result.get("arm") not in ("linux_namespaces", None):
        missing(f"linux_namespaces is not available here (ran on {result.get('arm')})")
    assert result["exit_code"] == 0, result
    return result


def test_a_directory_the_person_deleted_brings_nothing_of_theirs_back(
    setup: tuple[Path, Path],
) -> None:
    proj, config = setup
    ex(proj, config, "echo agent > d/a")
    shutil.rmtree(proj / "d")
    person = files(proj)
    seen = ex(proj, config, "find d | sort; cat d/a")
    assert seen["stdout"] == "d\nd/a\nagent\n", seen
    assert "d/a" in str(seen["changes"]["note"]), seen  # type: ignore[index]
    shown = json.loads(cli(proj, config, "workspace", "show", "--json", "w").stdout)
    assert sorted(c["path"] for c in shown["changes"]) == ["d", "d/a"], shown
    assert sorted(shown["conflicts"]) == ["d/a"], shown
    for chosen in ((), ("d",), ("d/b",), ("d/sub",), ("d/sub/x",)):
        done = cli(proj, config, "apply", "--workspace", "w", *chosen)
        assert files(proj) == person, (chosen, done.stdout, done.stderr)
    refused = cli(proj, config, "apply", "--workspace", "w", "d")
    assert refused.returncode == 1 and "refused d/a" in refused.stderr, refused.stderr
    applied = cli(proj, config, "apply", "--workspace", "w", "d/a")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert files(proj) == {**person, "d": "/", "d/a": "agent\n"}
