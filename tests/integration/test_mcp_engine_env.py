"""How an MCP server finds the engine (issue 27, item 7), started the way clients start it: the
SDK's stdio client with its default environment (HOME, PATH, SHELL, TERM, USER, LOGNAME -- no
DOCKER_HOST). On this machine docker listens only at the address `. .ci/env` names, so such a
server cannot reach it: its tool description and its refusal say which socket, that the
server's environment may lack DOCKER_HOST, and each fix once; `[sandbox.container] docker_host`
(docs/mcp.md) finds it without any environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.integration.conftest import missing


def _config(tmp: Path, image: str, docker_host: str | None) -> Path:
    (tmp / "tree").mkdir(exist_ok=True)
    (tmp / "scratch").mkdir(exist_ok=True)
    lines = [
        "[sandbox]",
        'arm = "container"',
        f'scratch_dir = "{tmp / "scratch"}"',
        "[state]",
        f'dir = "{tmp / "state"}"',
        "[sandbox.container]",
        'engine = "docker"',
        *([f'docker_host = "{docker_host}"'] if docker_host else []),
        "[sandbox.container.images]",
        f'docker = "{image}"',
    ]
    config = tmp / "sprawl.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def _serve(tmp: Path, config: Path) -> tuple[str, Any]:
    """(the exec tool's description, the result of one exec call)."""
    # env=None: the SDK's own default environment, as a client that was not told passes it.
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-c",
            "from sprawl_orch.cli import main; main()",
            "mcp",
            "-C",
            str(tmp / "tree"),
            "--config",
            str(config),
        ],
        cwd=str(tmp),
    )
    got: list[Any] = []

    async def scenario() -> None:
        with (tmp / "server-stderr").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                tools = {t.name: t for t in (await client.list_tools()).tools}
                got.append(tools["exec"].description or "")
                got.append(await client.call_tool("exec", {"command": ["true"]}))

    anyio.run(scenario)
    return got[0], got[1]


def test_a_server_without_docker_host_says_what_its_environment_lacks(
    tmp_path: Path, docker_image: str
) -> None:
    address = os.environ.get("DOCKER_HOST", "")
    if not address.startswith("unix://") or os.path.exists("/var/run/docker.sock"):
        missing("docker must listen only at a DOCKER_HOST of its own (. .ci/env)")
    described, result = _serve(tmp_path, _config(tmp_path, docker_image, None))
    said = "no docker socket at /var/run/docker.sock"
    assert said in described, described
    assert described.count("the environment may lack the DOCKER_HOST") == 1, described
    assert described.count("start the docker daemon so it listens at") == 1, described
    assert result.is_error
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert said in text and "E_SANDBOX_DENIED" in text, text
    assert "the environment may lack the DOCKER_HOST" in text, text
    assert f"a socket exists at {address.removeprefix('unix://')}" in text, text


def test_docker_host_in_the_config_finds_the_engine_without_any_environment(
    tmp_path: Path, docker_image: str
) -> None:
    address = os.environ.get("DOCKER_HOST", "")
    if not address:
        missing("DOCKER_HOST is not set (. .ci/env)")
    described, result = _serve(tmp_path, _config(tmp_path, docker_image, address))
    assert "Runs under container" in described, described
    assert not result.is_error, result
    assert (result.structured_content or {}).get("exit_code") == 0, result
