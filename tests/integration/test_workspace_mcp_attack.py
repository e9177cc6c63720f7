"""Attacks on workspaces through `sprawl-orch mcp` (the MCP SDK's own client), on
linux_namespaces (the rule under test is the server's, not the arm's): the agent asks
workspace_apply for what only a person may decide."""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.integration.conftest import missing
from tests.integration.test_mcp_real import session, structured, write_config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = write_config(tmp_path, "docker", "sha256:" + "0" * 64)
    text = path.read_text().replace('arm = "container"', 'arm = "native"')
    # The person's own protection on top of the table: no agent may apply into secrets/.
    path.write_text(
        text.split("[sandbox.container]")[0] + '\n[apply]\nprotected = ["secrets/**"]\n'
    )
    tree = tmp_path / "tree"
    (tree / "secrets").mkdir()
    (tree / "secrets" / "token").write_text("person's token\n")
    (tree / "README").write_text("readme\n")
    return path


def _ex(client: Any, run: str) -> Any:
    async def ex(line: str) -> dict[str, Any]:
        args = {"command": line, "run": run, "workspace": True}
        got = structured(await client.call_tool("exec", args))
        if got.get("code") == "E_TOOL_UNAVAILABLE":
            missing(f"the arm is not available here: {got.get('detail')}")
        assert got["exit_code"] == 0, got
        return got

    return ex


def test_workspace_apply_holds_the_configs_protected_globs(config: Path, tmp_path: Path) -> None:
    """[apply] protected globs hold on `apply` through mcp; workspace_apply must hold them too
    (the server passed none: the agent wrote the person's protected file)."""
    tree = tmp_path / "tree"
    run = f"ws-{secrets.token_hex(3)}"
    commands: list[str] = []

    async def scenario() -> None:
        async with session(tmp_path, config) as (client, _):
            await _ex(client, run)("echo agent > secrets/token")
            done = structured(await client.call_tool("workspace_apply", {"run": run}))
            assert [i["path"] for i in done["applied"]] == [], done
            assert [i["path"] for i in done["held"]] == ["secrets/token"], done
            # The command it names for the person works: the workspace, not a dropped handle.
            assert str(done["command"]).endswith(f"--protected secrets/token --workspace {run}")
            named = structured(
                await client.call_tool("workspace_apply", {"run": run, "paths": ["secrets/token"]})
            )
            assert named["applied"] == [], named
            commands.append(str(done["command"]))

    anyio.run(scenario)
    assert (tree / "secrets" / "token").read_text() == "person's token\n"
    # The person runs the command the answer named (a person may consent): it applies.
    argv = shlex.split(commands[0])
    argv[1:2] = ["apply", "--config", str(config)] if "--config" not in argv else ["apply"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tree / "secrets" / "token").read_text() == "agent\n"


def test_an_agent_cannot_resolve_a_conflict_over_the_persons_edit(
    config: Path, tmp_path: Path
) -> None:
    """attack6: through MCP an agent named the conflicting path in workspace_apply, wrote its
    version over the person's edit, then workspace_discard removed theirs/ -- the person's
    only other copy. serve/mcp now hold every conflict, named or not."""
    tree = tmp_path / "tree"
    run = f"ws-{secrets.token_hex(3)}"

    async def scenario() -> None:
        async with session(tmp_path, config) as (client, _):
            ex = _ex(client, run)
            await ex("echo agent > README")
            (tree / "README").write_text("the person's work\n")
            note = str((await ex("true"))["changes"]["note"])
            assert "conflicts" in note and "README" in note, note
            await client.call_tool("workspace_apply", {"run": run, "paths": ["README"]})
            await client.call_tool("workspace_discard", {"run": run})

    anyio.run(scenario)
    assert (tree / "README").read_text() == "the person's work\n"
