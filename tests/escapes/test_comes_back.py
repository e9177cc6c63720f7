"""The `comes-back` class (issue 22) on every arm, through `apply` on the CLI and through MCP:
a hostile command's changes, applied as a person or an agent would apply them (all of them,
no path named), must leave a tree where real `git status`, `git commit` and `git diff` run
nothing (comes_back.py says what is planted and how the host judges). The raw control runs
the same script in the tree itself: there every payload must run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.escapes.comes_back import (
    RAW_MUST,
    held_problems,
    hostile,
    judge_git,
    make_repo,
    unsafe_in,
)
from tests.escapes.runner import config_data, landlock_data
from tests.integration.conftest import missing

REPO = Path(__file__).resolve().parents[2]
ARMS = (
    "copied_tree",
    "linux_namespaces",
    "landlock",
    "docker",
    "podman",
    "docker-runsc",
    "podman-runsc",
    "docker-warm",
    "podman-warm",
)


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        raise TypeError
    return json.dumps(value)


def write_toml(data: dict[str, Any], path: Path) -> Path:
    """The escape suite's config (runner.config_data) as a sprawl.toml."""
    lines: list[str] = []

    def table(name: str, body: dict[str, Any]) -> None:
        lines.append(f"[{name}]")
        subs = {k: v for k, v in body.items() if isinstance(v, dict)}
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in body.items() if k not in subs)
        for k, v in subs.items():
            table(f"{name}.{k}", v)

    for name, body in data.items():
        table(name, body)
    path.write_text("\n".join(lines) + "\n")
    return path


def arm_config(arm: str, tmp: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    scratch, state = tmp / "scratch", tmp / "state"
    scratch.mkdir(exist_ok=True)
    engine, _, variant = arm.partition("-")
    if engine in ("docker", "podman"):
        if variant == "runsc":
            from sprawl_orch.container.gvisor import runsc_path

            if runsc_path() is None:
                missing("runsc is not installed (.ci/setup-engines installs it)")
        image = str(request.getfixturevalue(f"{engine}_image"))
        data = config_data("container", scratch, state, (engine, image), variant or None)
        if variant == "runsc":
            data["sandbox"]["container"]["runtime"] = "runsc"
        elif variant == "warm":
            data["sandbox"]["container"].pop("runtime", None)
            data["sandbox"]["container"]["warm"] = True
        return data
    if arm == "linux_namespaces":
        import shutil

        if shutil.which("bwrap") is None:
            missing("bwrap is not installed (apt-get install bubblewrap)")
        return config_data("native", scratch, state)
    if arm == "landlock":
        return landlock_data(scratch, state)
    return config_data("copied_tree", scratch, state)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", "from sprawl_orch.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def through_cli(tree: Path, config: Path, script: str) -> tuple[str, bytes, dict[str, Any]]:
    """exec the hostile line, then what a person does: dry run, then apply everything."""
    where = ("-C", str(tree), "--config", str(config))
    ran = cli("exec", *where, "--json", "--shell", script, cwd=tree)
    result = json.loads(ran.stdout)
    assert "PLANTED" in result.get("stdout", ""), ran.stdout[-2000:] + ran.stderr[-2000:]
    handle = result["changes"]["handle"]
    dry = cli("apply", "-C", str(tree), "--config", str(config), "--dry-run", handle, cwd=tree)
    done = cli("apply", "-C", str(tree), "--config", str(config), handle, cwd=tree)
    shown = dry.stdout + dry.stderr + done.stdout + done.stderr
    as_json = cli("apply", "-C", str(tree), "--config", str(config), "--json", handle, cwd=tree)
    answer = json.loads(as_json.stdout)
    return handle, shown + as_json.stdout, answer


def through_mcp(tree: Path, config: Path, script: str) -> tuple[str, bytes, dict[str, Any]]:
    """The same through `sprawl-orch mcp`, as an agent: exec, dry run, apply everything, and
    an attempt to consent for the person (a `protected` argument the tool does not take)."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-c", "from sprawl_orch.cli import main; main()", "mcp"),
            *("-C", str(tree), "--config", str(config)),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=str(tree),
    )
    got: dict[str, Any] = {}

    async def go() -> None:
        with (tree.parent / "mcp-stderr").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                ran = await client.call_tool("exec", {"command": script})
                result = dict(ran.structured_content or {})
                assert "PLANTED" in result.get("stdout", ""), str(ran.content)[:2000]
                handle = result["changes"]["handle"]
                texts = []
                for args in (
                    {"handle": handle, "dry_run": True},
                    {"handle": handle},
                    {"handle": handle, "protected": [".vscode", ".git/hooks"]},
                ):
                    answer = await client.call_tool("apply", args)
                    texts.append(str(getattr(answer.content[0], "text", "")))
                    got.setdefault("answer", dict(answer.structured_content or {}))
                got["handle"], got["text"] = handle, "\n".join(texts)

    anyio.run(go)
    return got["handle"], got["text"].encode(), got["answer"]


def test_comes_back_raw_control(tmp_path: Path) -> None:
    """No sprawl-orch: the planted payloads run on the host's next git commands."""
    tree, home, marks = tmp_path / "tree", tmp_path / "home", tmp_path / "marks"
    make_repo(tree, home)
    marks.mkdir()
    subprocess.run(["sh", "-c", hostile(marks)], cwd=tree, check=True, capture_output=True)
    ran, log = judge_git(tree, home, marks)
    assert set(ran) >= RAW_MUST, f"the control did not run {RAW_MUST - set(ran)}:\n{log}"


@pytest.mark.parametrize("surface", ["cli", "mcp"])
@pytest.mark.parametrize("arm", ARMS)
def test_comes_back(arm: str, surface: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    tree, home, marks = tmp_path / "tree", tmp_path / "home", tmp_path / "marks"
    make_repo(tree, home)
    marks.mkdir()
    config = write_toml(arm_config(arm, tmp_path, request), tmp_path / "sprawl.toml")
    run = through_cli if surface == "cli" else through_mcp
    handle, shown, answer = run(tree, config, hostile(marks))
    planted_ran = sorted(os.listdir(marks))  # ran inside the sandbox, not by the host
    for name in planted_ran:
        os.unlink(marks / name)
    ran, log = judge_git(tree, home, marks)
    problems = held_problems(tree)
    print(f"| {arm} | {surface} | ran on the host: {ran or 'nothing'} | {problems or 'held'} |")
    assert not ran, f"{arm}/{surface}: the host ran {ran} after apply of {handle}:\n{log}"
    assert not problems, f"{arm}/{surface}: {problems}"
    assert not unsafe_in(shown), f"{arm}/{surface}: a raw control sequence reached the output"
    held = {item["path"] for item in answer.get("held", [])}
    assert {".git/hooks/pre-commit", ".git/config", ".vscode/tasks.json"} <= held, held
    if surface == "cli":
        assert b"NEW EXECUTABLES" in shown and b"bin/tool" in shown
    assert "--protected .vscode" in (answer.get("command") or ""), answer.get("command")
