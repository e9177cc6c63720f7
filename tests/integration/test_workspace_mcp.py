"""Workspaces through `sprawl-orch mcp` (the MCP SDK's own client) on docker, podman and
linux_namespaces (issue 23): exec with workspace=true keeps the agent's edits for its next
command, the person's edit flows in, a both-changed file is a named conflict with both
versions kept, workspace_apply brings exactly the agent's work beside the person's and holds
the conflict back, workspace_discard drops the rest."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.integration.conftest import missing
from tests.integration.test_mcp_real import session, structured, write_config


@pytest.fixture(params=["docker", "podman", "linux_namespaces"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    arm = str(request.param)
    if arm == "linux_namespaces":
        path = write_config(tmp_path, "docker", "sha256:" + "0" * 64)
        text = path.read_text().replace('arm = "container"', 'arm = "native"')
        path.write_text(text.split("[sandbox.container]")[0])
    else:
        path = write_config(tmp_path, arm, str(request.getfixturevalue(f"{arm}_image")))
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir()
    (tree / "pkg" / "more.py").write_text("def one():\n    return 1\n")
    (tree / "README").write_text("readme\n")
    return path


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_flow_through_mcp(config: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    before = files(tree)
    run = f"ws-{secrets.token_hex(3)}"

    async def scenario() -> None:
        async with session(tmp_path, config) as (client, _):

            async def ex(line: str) -> dict[str, Any]:
                args = {"command": line, "run": run, "workspace": True}
                got = structured(await client.call_tool("exec", args))
                if got.get("code") == "E_TOOL_UNAVAILABLE":
                    missing(f"the arm is not available here: {got.get('detail')}")
                assert got["exit_code"] == 0, got
                return got

            await ex("sed -i 's/return 1/return 11/' pkg/more.py; echo agent > t2.txt")
            assert (await ex("grep -c 'return 11' pkg/more.py; cat t2.txt"))["stdout"] == (
                "1\nagent\n"
            )
            (tree / "README").write_text("the person's readme\n")
            assert (await ex("cat README"))["stdout"] == "the person's readme\n"
            (tree / "pkg" / "more.py").write_text("def one():\n    return 1.0\n")
            note = str((await ex("true"))["changes"]["note"])
            assert "conflicts" in note and "pkg/more.py" in note, note
            dry = structured(
                await client.call_tool("workspace_apply", {"run": run, "dry_run": True})
            )
            assert "+    return 11" in str(dry["diff"]), dry
            done = structured(await client.call_tool("workspace_apply", {"run": run}))
            assert [i["path"] for i in done["applied"]] == ["t2.txt"], done
            assert [(i["path"], i["change"]) for i in done["refused"]] == [
                ("pkg/more.py", "conflict")
            ]
            assert files(tree) == {
                **before,
                "README": "the person's readme\n",
                "pkg/more.py": "def one():\n    return 1.0\n",
                "t2.txt": "agent\n",
            }
            gone = structured(await client.call_tool("workspace_discard", {"run": run}))
            assert gone["run"] == run
            # Discarded: the next workspace command starts from the person's tree.
            assert (await ex("grep -c 'return 1.0' pkg/more.py"))["stdout"] == "1\n"

    anyio.run(scenario)
