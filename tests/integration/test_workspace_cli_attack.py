"""Attacks on workspaces through the real CLI on linux_namespaces: an agent command reaching for
the workspace's own bookkeeping, and two CLI processes in one workspace at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import missing


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "README").write_text("readme\n")
    (tmp_path / "scratch").mkdir()
    config = tmp_path / "sprawl.toml"
    config.write_text(
        f'[sandbox]\nscratch_dir = "{tmp_path / "scratch"}"\narm = "native"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    return proj, config


def _argv(proj: Path, config: Path, *args: str) -> list[str]:
    cut = 2 if args[0] == "workspace" else 1
    return ["sprawl-orch", *args[:cut], "-C", str(proj), "--config", str(config), *args[cut:]]


ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def ex(proj: Path, config: Path, line: str) -> dict[str, object]:
    argv = _argv(proj, config, "exec", "--json", "--workspace", "w", "--shell", "--", line)
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.stdout, done.stderr
    result = dict(json.loads(done.stdout))
    if result.get("arm") not in ("linux_namespaces", None):
        missing(f"linux_namespaces is not available here (ran on {result.get('arm')})")
    return result


def test_an_agent_command_cannot_reach_the_workspaces_bookkeeping(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    """The base, bases/ and meta.json decide what is the agent's and what is the person's: a
    command writing there could pass its work off as the person's. They are out of its view."""
    proj, config = setup
    ex(proj, config, "true")
    (ws,) = (tmp_path / "state" / "workspaces").glob("*/w")
    line = f"echo evil > {ws}/base/README; echo evil > {ws}/meta.json; ls {ws}; echo agent > a"
    ex(proj, config, line)
    assert (ws / "base" / "README").read_text() == "readme\n"
    assert json.loads((ws / "meta.json").read_text())["name"] == "w"
    shown = subprocess.run(
        _argv(proj, config, "workspace", "show", "--json", "w"),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert [c["path"] for c in json.loads(shown.stdout)["changes"]] == ["a"], shown.stderr


def test_two_cli_processes_in_one_workspace_at_once_keep_both(
    setup: tuple[Path, Path],
) -> None:
    proj, config = setup
    ex(proj, config, "true")
    procs = [
        subprocess.Popen(
            _argv(proj, config, "exec", "--json", "--workspace", "w", "--shell", "--", line),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for line in ("echo one > one.txt", "echo two > two.txt")
    ]
    (proj / "README").write_text("person\n")  # flows in before one of them, or the next
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    ex(proj, config, "true")
    shown = subprocess.run(
        _argv(proj, config, "workspace", "show", "--json", "w"),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    view = json.loads(shown.stdout)
    assert sorted(c["path"] for c in view["changes"]) == ["one.txt", "two.txt"], view
    assert view["conflicts"] == {} and view["running"] == 0
    tree = Path(view["path"])
    assert (tree / "README").read_text() == "person\n"


def test_a_huge_file_flowing_in_refuses_the_next_command_and_keeps_the_work(
    setup: tuple[Path, Path],
) -> None:
    """A workspace is never evicted: past the copy budget the next command is refused (coded,
    naming the workspace), and the agent's work and the person's file are both still there."""
    proj, config = setup
    config.write_text(config.read_text() + "[sandbox.copy]\nbudget_bytes = 4000000\n")
    assert ex(proj, config, "echo agent > a")["exit_code"] == 0
    (proj / "big").write_bytes(os.urandom(3_000_000))
    argv = _argv(proj, config, "exec", "--json", "--workspace", "w", "--shell", "--", "true")
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode != 0
    answer = json.loads(done.stdout or done.stderr)
    assert answer["code"] == "E_COPY_BOUND" and "'w'" in str(answer), answer
    shown = subprocess.run(
        _argv(proj, config, "workspace", "show", "--json", "w"),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    view = json.loads(shown.stdout)
    assert [c["path"] for c in view["changes"]] == ["a"], view
    assert (Path(view["path"]) / "a").read_text() == "agent\n"
    assert (proj / "big").stat().st_size == 3_000_000


def test_state_deleted_between_cli_calls_is_said_not_pretended(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    """A new CLI process can't tell a first use from a deleted state directory: `show` says
    there is no such workspace, and the next command says it made the workspace afresh and
    why that may be -- on the terminal too (it printed nothing with no change)."""
    proj, config = setup
    ex(proj, config, "echo agent > agent-only.txt")
    subprocess.run(["rm", "-rf", str(tmp_path / "state")], check=True)
    shown = subprocess.run(
        _argv(proj, config, "workspace", "show", "w"),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert shown.returncode != 0 and "no workspace 'w'" in shown.stderr, shown.stderr
    argv = _argv(proj, config, "exec", "--workspace", "w", "--shell", "--", "ls")
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["README"], done
    said = "no workspace 'w' was kept for this directory (a new name, or its state directory"
    assert said in done.stderr, done.stderr


def test_another_cli_process_starting_does_not_cut_the_way_to_the_tree(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    """The cause of the flake above, made steady: every CLI process prepares the state
    directory as it starts, and its chmod 0700 masked out the sandbox uid's search entry
    while a workspace command's bwrap was reaching the tree under it ("bwrap: Can't find
    source path .../w/tree: Permission denied", exit 1). Here one process prepares it over
    and over while commands start in the workspace: every one runs."""
    proj, config = setup
    ex(proj, config, "true")
    loop = (
        "import sys, time\nfrom pathlib import Path\n"
        "from sprawl_orch.core.private import prepare_state\n"
        "end = time.monotonic() + 60\n"
        "while time.monotonic() < end:\n    prepare_state(Path(sys.argv[1]))\n"
    )
    other = subprocess.Popen([sys.executable, "-c", loop, str(tmp_path / "state")])
    try:
        for n in range(4):
            result = ex(proj, config, f"echo {n} > n{n}.txt")
            assert result["exit_code"] == 0, result["stderr"]
    finally:
        other.kill()
        other.wait()


def test_a_moved_working_directory_is_a_coded_refusal_and_the_workspace_kept(
    setup: tuple[Path, Path],
) -> None:
    proj, config = setup
    ex(proj, config, "echo agent > agent-only.txt")
    proj.rename(proj.with_name("moved"))
    argv = _argv(proj, config, "exec", "--json", "--workspace", "w", "--shell", "--", "true")
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300)
    answer = json.loads(done.stdout)
    assert done.returncode == 125 and answer["code"] == "E_STORAGE_FATAL", answer
    assert "workspace 'w' is missing" in answer["detail"] and "kept" in answer["detail"]
    proj.with_name("moved").rename(proj)  # moved back: the agent's work is all there
    assert ex(proj, config, "cat agent-only.txt")["stdout"] == "agent\n"
