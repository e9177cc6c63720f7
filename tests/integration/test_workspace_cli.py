"""Workspaces through the real CLI on docker, podman and linux_namespaces (issue 23): on a small
generated Python project, the agent edits and its next command sees the edit; the person edits
another file and the next command sees that; both edit one file and the conflict is named
with both versions kept; apply brings exactly the agent's work beside the person's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import missing

ARMS = ["docker", "podman", "linux_namespaces"]


def files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(params=ARMS)
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path, str]:
    arm = request.param
    proj = tmp_path / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "pkg" / "more.py").write_text("def one():\n    return 1\n")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_more.py").write_text("from pkg.more import one\n")
    (proj / "README").write_text("readme\n")
    lines = ["[sandbox]", f'scratch_dir = "{tmp_path / "scratch"}"']
    if arm in ("docker", "podman"):
        image = str(request.getfixturevalue(f"{arm}_image"))
        lines += ['arm = "container"', "[sandbox.container]", f'engine = "{arm}"']
        lines += ["[sandbox.container.images]", f'{arm} = "{image}"']
    else:
        lines += ['arm = "native"']
    lines += ["[state]", f'dir = "{tmp_path / "state"}"']
    (tmp_path / "scratch").mkdir()
    config = tmp_path / "sprawl.toml"
    config.write_text("\n".join(lines) + "\n")
    return proj, config, arm


def cli(proj: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cut = 2 if args[0] == "workspace" else 1  # -C and --config belong to the subcommand
    first, rest = args[:cut], args[cut:]
    return subprocess.run(
        ["sprawl-orch", *first, "-C", str(proj), "--config", str(config), *rest],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def run(proj: Path, config: Path, line: str, arm: str) -> dict[str, object]:
    done = cli(proj, config, "exec", "--json", "--workspace", "fix", "--shell", "--", line)
    assert done.stdout, done.stderr
    result = json.loads(done.stdout)
    arm_used = result.get("arm")
    want = "container" if arm in ("docker", "podman") else arm
    if arm_used not in (want, None):
        missing(f"the {arm} arm is not available here (ran on {arm_used})")
    assert result["exit_code"] == 0, result
    return dict(result)


def test_the_flow_through_the_cli(setup: tuple[Path, Path, str]) -> None:
    proj, config, arm = setup
    before = files(proj)
    run(proj, config, "sed -i 's/return 1/return 11/' pkg/more.py; echo agent > tests/t2.py", arm)
    assert files(proj) == before  # the person's tree is untouched
    seen = run(proj, config, "grep -q 'return 11' pkg/more.py && cat tests/t2.py", arm)
    assert seen["stdout"] == "agent\n"
    (proj / "README").write_text("the person's readme\n")
    seen = run(proj, config, "cat README", arm)
    assert seen["stdout"] == "the person's readme\n"
    (proj / "pkg" / "more.py").write_text("def one():\n    return 1.0\n")
    both = run(proj, config, "true", arm)
    changes = both["changes"]
    assert isinstance(changes, dict)
    assert "conflicts" in str(changes["note"]) and "pkg/more.py" in str(changes["note"])
    shown = json.loads(cli(proj, config, "workspace", "show", "--json", "fix").stdout)
    theirs = Path(shown["conflicts"]["pkg/more.py"])
    assert theirs.read_text() == "def one():\n    return 1.0\n"
    dry = cli(proj, config, "apply", "--workspace", "fix", "--dry-run")
    assert "+    return 11" in dry.stdout, dry.stdout + dry.stderr
    applied = cli(proj, config, "apply", "--workspace", "fix")
    assert applied.returncode == 1 and "refused pkg/more.py" in applied.stderr, applied.stderr
    assert files(proj) == {
        **before,
        "README": "the person's readme\n",
        "pkg/more.py": "def one():\n    return 1.0\n",
        "tests/t2.py": "agent\n",
    }
    # The agent's version of the conflict is still in the workspace until taken or discarded.
    assert cli(proj, config, "workspace", "take", "fix", "pkg/more.py").returncode == 0
    assert cli(proj, config, "workspace", "discard", "fix").returncode == 0
    assert "no workspaces" in cli(proj, config, "workspace", "list").stdout


def test_bad_name_is_config_invalid(setup: tuple[Path, Path, str]) -> None:
    proj, config, _ = setup
    done = cli(proj, config, "exec", "--json", "--workspace", "../x", "true")
    result = json.loads(done.stdout)
    assert result["code"] == "E_CONFIG_INVALID" and "workspace name" in result["detail"], result


def test_person_directory_chmod_reaches_the_next_command(setup: tuple[Path, Path, str]) -> None:
    """A directory's mode flows in as a file's does (it did not: the sync named no path for
    bits alone), and the agent's edit inside that directory stays."""
    proj, config, arm = setup
    run(proj, config, "sed -i 's/return 1/return 11/' pkg/more.py", arm)
    os.chmod(proj / "pkg", 0o750)
    seen = run(proj, config, "stat -c %a pkg; grep -c 'return 11' pkg/more.py", arm)
    assert seen["stdout"] == "750\n1\n", seen
    assert "pkg" in str(seen["changes"]["note"])  # type: ignore[index]


def test_a_failed_flow_in_keeps_the_workspace_as_it_was(setup: tuple[Path, Path, str]) -> None:
    """The person's tree goes over a bound midway through the base sync: the command is
    refused, saying the workspace is kept as it was; the agent's work is all there (a failed
    sync had deleted the base, and the next call made the workspace afresh without it)."""
    proj, config, arm = setup
    config.write_text(config.read_text() + "[sandbox.copy]\nmax_bytes = 200000\n")
    run(proj, config, "echo agent > pkg/more.py; echo mine > agent.txt", arm)
    (proj / "README").write_text("person readme\n")
    # 0.6x the bound each: whichever the sync meets second is over it, in any walk order
    (proj / "big1").write_bytes(b"1" * 120_000)
    (proj / "pkg" / "big2").write_bytes(b"2" * 120_000)
    person = files(proj)
    done = cli(proj, config, "exec", "--json", "--workspace", "fix", "--shell", "--", "true")
    answer = json.loads(done.stdout or done.stderr)
    assert done.returncode != 0 and answer["code"] == "E_COPY_BOUND", answer
    assert "'fix': it is kept as it was before this command" in answer["detail"], answer
    assert files(proj) == person
    shown = json.loads(cli(proj, config, "workspace", "show", "--json", "fix").stdout)
    assert [c["path"] for c in shown["changes"]] == ["agent.txt", "pkg/more.py"], shown
    (proj / "big1").unlink()
    seen = run(proj, config, "cat pkg/more.py agent.txt README; wc -c < pkg/big2", arm)
    assert seen["stdout"] == "agent\nmine\nperson readme\n120000\n", seen


def test_a_conflict_on_a_directorys_bits_is_kept_and_taken_alone(
    setup: tuple[Path, Path, str],
) -> None:
    """Both sides chmod one directory: the person's bits are kept under theirs/ and named;
    `workspace take` takes those bits only, never the agent's files under the directory."""
    proj, config, arm = setup
    run(proj, config, "chmod 705 pkg; echo agent > pkg/new.py; echo 2 > pkg/more.py", arm)
    os.chmod(proj / "pkg", 0o750)
    both = run(proj, config, "true", arm)
    assert "conflicts" in str(both["changes"]["note"]), both  # type: ignore[index]
    shown = json.loads(cli(proj, config, "workspace", "show", "--json", "fix").stdout)
    theirs = Path(shown["conflicts"]["pkg"])
    assert oct(theirs.stat().st_mode & 0o777) == oct(0o750), shown
    taken = cli(proj, config, "workspace", "take", "fix", "pkg")
    assert taken.returncode == 0, taken.stderr
    seen = run(proj, config, "stat -c %a pkg; cat pkg/new.py pkg/more.py", arm)
    assert seen["stdout"] == "750\nagent\n2\n", seen
    shown = json.loads(cli(proj, config, "workspace", "show", "--json", "fix").stdout)
    assert shown["conflicts"] == {}, shown
    assert sorted(c["path"] for c in shown["changes"]) == ["pkg/more.py", "pkg/new.py"]
