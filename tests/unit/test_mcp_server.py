"""The MCP tools in-process (the SDK's Client over its in-memory transport) on copied_tree:
the text an agent reads, the structured result, errors as is_error results, the schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.serve import mcp_server
from sprawl_orch.serve.server import Server
from tests.unit.conftest import make_config


def calls(
    tmp_path: Path, tree: Path, offerings: Offerings, steps: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    server = Server(make_config(tmp_path, arm="copied_tree"), tree, None, offerings=offerings)
    got: list[Any] = []

    async def scenario() -> None:
        async with Client(mcp_server.build(server)) as client:
            got.append(await client.list_tools())
            for name, args in steps:
                got.append(await client.call_tool(name, args))

    try:
        anyio.run(scenario)
    finally:
        server.close()
    return got


def test_exec_text_and_structured_result(
    tmp_path: Path, tree: Path, scratch: Path, offerings: Offerings
) -> None:
    listed, argv, line, slow = calls(
        tmp_path,
        tree,
        offerings,
        [
            ("exec", {"command": ["cat", "README"]}),
            ("exec", {"command": "echo out; echo err >&2; exit 4"}),
            ("exec", {"command": "sleep 5", "window": 0.05, "run": "r"}),
        ],
    )[:4]
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == {
        "exec",
        "harvest",
        "halt",
        "release",
        "doctor",
        "apply",
        "workspace_apply",
        "workspace_discard",
    }
    assert "Runs under copied_tree" in (tools["exec"].description or "")
    assert "outcome" in (tools["exec"].output_schema or {}).get("properties", {})
    assert argv.structured_content["stdout"] == "readme\n" and not argv.is_error
    said = argv.content[0].text
    assert said.startswith("settled: finished, exit code 0")
    assert argv.structured_content["confinement"]["statement"] in said
    assert line.structured_content["shell"] is True  # a string is one shell line
    assert "exit code 4" in line.content[0].text and "err" in line.content[0].text
    assert slow.structured_content["outcome"] == "backgrounded"
    assert slow.structured_content["handle"] in slow.content[0].text


def test_halt_release_harvest_doctor_and_errors(
    tmp_path: Path, tree: Path, scratch: Path, offerings: Offerings
) -> None:
    got = calls(
        tmp_path,
        tree,
        offerings,
        [
            ("exec", {"command": ["sleep", "30"], "window": 0.05, "run": "a"}),
            ("halt", {"handle": "no-such-1"}),
            ("release", {"run": "a"}),
            ("harvest", {}),
            ("doctor", {}),
            ("exec", {"command": [""]}),
            ("exec", {"command": ["true"], "window": -1}),
        ],
    )
    _, _bg, unknown, released, harvested, doctor, empty, bad = got
    assert unknown.is_error and unknown.content[0].text.startswith("E_UNKNOWN_HANDLE")
    assert unknown.structured_content["code"] == "E_UNKNOWN_HANDLE"
    [killed] = released.structured_content["results"]
    assert killed["killed"] is True and "killed" in released.content[0].text
    assert harvested.structured_content == {"results": [], "left": None}
    assert "no background command has finished" in harvested.content[0].text
    assert "auto ->" in doctor.content[0].text and doctor.structured_content["arms"]
    assert empty.is_error and "E_BAD_REQUEST" in empty.content[0].text
    assert bad.is_error  # refused by the tool's input schema: window > 0


def test_apply_a_commands_changes(
    tmp_path: Path, tree: Path, scratch: Path, offerings: Offerings
) -> None:
    server = Server(make_config(tmp_path, arm="copied_tree"), tree, None, offerings=offerings)
    got: list[Any] = []

    async def scenario() -> None:
        async with Client(mcp_server.build(server)) as client:
            wrote = await client.call_tool("exec", {"command": "echo new > made.txt"})
            handle = wrote.structured_content["changes"]["handle"]
            got.append(await client.call_tool("apply", {"handle": handle, "dry_run": True}))
            assert not (tree / "made.txt").exists()
            got.append(await client.call_tool("apply", {"handle": handle}))

    try:
        anyio.run(scenario)
    finally:
        server.close()
    dry, done = got
    assert dry.content[0].text.startswith("dry run: would apply 1 change(s)")
    assert "made.txt" in dry.content[0].text and dry.structured_content["dry_run"] is True
    assert done.structured_content["applied"][0]["path"] == "made.txt" and not done.is_error
    assert (tree / "made.txt").read_text() == "new\n"
