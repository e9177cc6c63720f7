"""`sprawl-orch mcp` driven by the MCP SDK's own client (mcp.client.stdio + ClientSession)
against real engines: list tools, run a command on each arm this machine has (container on
docker and on podman), halt a backgrounded container command, and a harness-style soak of 200
calls that must leave no container, copy or process behind.

Leaks are counted by this test's own names: containers by the `sprawl.run` labels of runs
named here, copies in this test's scratch directory, processes by the server's descendants
(sampled while it runs) and by their working directory under this test's tmp_path.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from tests.integration.conftest import in_ci
from tests.integration.test_serve_load import bwrap_raced

REPO = Path(__file__).resolve().parents[2]
TOOLS = {
    "exec",
    "harvest",
    "halt",
    "release",
    "doctor",
    "apply",
    "workspace_apply",
    "workspace_discard",
}


def write_config(tmp: Path, engine: str, image: str) -> Path:
    (tmp / "tree").mkdir(exist_ok=True)
    (tmp / "tree" / "a.txt").write_text("from the tree\n")
    (tmp / "scratch").mkdir(exist_ok=True)
    config = tmp / "sprawl.toml"
    config.write_text(
        "\n".join(
            [
                "[sandbox]",
                'arm = "container"',
                f'scratch_dir = "{tmp / "scratch"}"',
                "window_seconds = 30",
                "[state]",
                f'dir = "{tmp / "state"}"',
                "[sandbox.container]",
                f'engine = "{engine}"',
                "[sandbox.container.images]",
                f'{engine} = "{image}"',
            ]
        )
        + "\n"
    )
    return config


@contextlib.asynccontextmanager
async def session(
    tmp: Path,
    config: Path,
    *extra: str,
) -> AsyncIterator[tuple[ClientSession, int]]:
    """The server as an agent would start it (docs/mcp.md), and the SDK's client session."""
    env = {"PYTHONPATH": str(REPO), "DOCKER_HOST": os.environ.get("DOCKER_HOST", "")}
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
            *extra,
        ],
        env=env,
        cwd=str(tmp),
    )
    with (tmp / "server-stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            server = next(
                p
                for p in psutil.Process().children(recursive=True)
                if str(config) in _cmdline(p) and "mcp" in _cmdline(p)
            )
            yield client, server.pid


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:  # a zombie another test left (not ours to reap)
        return []


def text(result: CallToolResult) -> str:
    first = result.content[0]
    return str(getattr(first, "text", ""))


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, text(result)
    return dict(result.structured_content)


def labelled(engine: str, run: str) -> list[str]:
    done = subprocess.run(
        [engine, "ps", "-aq", "--filter", f"label=sprawl.run={run}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def native_works() -> bool:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    from sprawl_orch.native_fallbacks.bwrap import user_namespace_works

    return bool(user_namespace_works(bwrap)[0])


def test_tools_on_every_arm_and_halt(engine_image: tuple[str, str], tmp_path: Path) -> None:
    engine, image = engine_image
    config = write_config(tmp_path, engine, image)
    run = f"mcp-{secrets.token_hex(3)}"
    arms = ["container", "copied_tree"] + (["native"] if native_works() else [])
    if engine == "docker" and not native_works() and in_ci():
        pytest.fail("bwrap cannot make a user namespace here; CI machines must offer it")

    async def scenario() -> None:
        async with session(tmp_path, config) as (client, _):
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == TOOLS
            exec_tool = next(t for t in listed.tools if t.name == "exec")
            # The configured arm's statement is in the description (design §1).
            assert "Runs under container" in (exec_tool.description or ""), exec_tool
            assert exec_tool.output_schema is not None

            for arm in arms:
                got = await client.call_tool(
                    "exec", {"command": ["cat", "a.txt"], "arm": arm, "run": run}
                )
                body = structured(got)
                assert not got.is_error and body["outcome"] == "settled", text(got)
                assert body["stdout"] == "from the tree\n" and body["exit_code"] == 0
                assert body["confinement"]["statement"] in text(got)
                assert "from the tree" in text(got)
            expected_arm = {
                "container": "container",
                "copied_tree": "copied_tree",
                "native": "linux_namespaces",
            }
            assert body["arm"] == expected_arm[arms[-1]]

            line = await client.call_tool(
                "exec", {"command": "echo out; echo err >&2; exit 3", "run": run}
            )
            body = structured(line)
            assert (body["exit_code"], body["stdout"], body["stderr"]) == (3, "out\n", "err\n")
            assert body["container"]["verified"] is True and body["container"]["engine"] == engine

            host = await client.call_tool("exec", {"command": ["pwd"], "where": "host", "run": run})
            assert structured(host)["stdout"].strip() == str(tmp_path / "tree")

            slow = await client.call_tool(
                "exec", {"command": "sleep 60", "window": 0.5, "run": run}
            )
            handle = structured(slow)["handle"]
            assert structured(slow)["outcome"] == "backgrounded" and handle in text(slow)
            assert len(labelled(engine, run)) == 1
            halted = await client.call_tool("halt", {"handle": handle})
            assert structured(halted)["killed"] is True, text(halted)
            assert structured(halted)["container"]["removed"] is True
            assert labelled(engine, run) == []

            unknown = await client.call_tool("halt", {"handle": "nope-1"})
            assert unknown.is_error and "E_UNKNOWN_HANDLE" in text(unknown)
            doctor = await client.call_tool("doctor", {})
            assert any(row["arm"] == "container" for row in structured(doctor)["arms"])

    anyio.run(scenario)
    assert labelled(engine, run) == []
    assert list((tmp_path / "scratch").iterdir()) == []


SOAK = 200


def soak_call(i: int, run: str) -> tuple[str, dict[str, Any]]:
    """The i-th call of the soak: mostly short commands over every arm, as an agent issues
    them; some outlive their window and are halted, harvested or released."""
    arm = ("container", "copied_tree", "native")[i % 3]
    if i % 25 == 3:
        return "exec", {"command": "sleep 0.2; echo late", "window": 0.05, "arm": arm, "run": run}
    if i % 40 == 11:
        return "exec", {
            "command": "sleep 61 & sleep 62",
            "window": 0.05,
            "arm": arm,
            "run": f"{run}-doomed",
        }
    if i % 10 == 7:
        return "harvest", {}
    return "exec", {"command": ["sh", "-c", f"echo {i}; ls >/dev/null"], "arm": arm, "run": run}


def test_soak_200_calls_leave_nothing(docker_image: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, "docker", docker_image)
    run = f"soak-{secrets.token_hex(3)}"
    skip_native = not native_works()
    seen: dict[int, psutil.Process] = {}
    counts: dict[str, int] = {}

    def sample(pid: int) -> None:
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(pid).children(recursive=True):
                seen.setdefault(p.pid, p)

    async def scenario() -> None:
        async with session(tmp_path, config) as (client, pid):
            limit = anyio.Semaphore(4)
            backgrounded: list[str] = []

            async def one(i: int) -> None:
                name, args = soak_call(i, run)
                if skip_native and args.get("arm") == "native":
                    args["arm"] = "copied_tree"
                async with limit:
                    got = await client.call_tool(name, args)
                assert not got.is_error, text(got)
                body = structured(got)
                if name == "exec":
                    counts[body["arm"]] = counts.get(body["arm"], 0) + 1
                    if body["outcome"] == "backgrounded":
                        backgrounded.append(body["handle"])
                    elif bwrap_raced(body):  # counted and printed, as serve's load does
                        counts["bwrap mount race"] = counts.get("bwrap mount race", 0) + 1
                    else:
                        assert body["stdout"] == f"{i}\n", (body["stdout"], body["stderr"])
                sample(pid)

            async with anyio.create_task_group() as group:
                for i in range(SOAK - 10):
                    group.start_soon(one, i)
            # The rest: halt one, release the doomed run, harvest until the backlog is empty.
            long = await client.call_tool(
                "exec", {"command": "sleep 66", "window": 0.05, "run": run}
            )
            halted = await client.call_tool("halt", {"handle": structured(long)["handle"]})
            assert structured(halted)["killed"] is True, text(halted)
            released = await client.call_tool("release", {"run": f"{run}-doomed"})
            assert structured(released)["results"], text(released)
            for _ in range(8):
                await client.call_tool("harvest", {})
                await anyio.sleep(0.1)
            assert labelled("docker", run) == [] and labelled("docker", f"{run}-doomed") == []
            # One left running when the client goes away: released by the server's close.
            left = await client.call_tool(
                "exec", {"command": "sleep 65", "window": 0.05, "run": run}
            )
            assert structured(left)["outcome"] == "backgrounded"
            sample(pid)

    anyio.run(scenario)
    print(f"\nsoak: {SOAK} calls, execs by arm {counts}, processes seen {len(seen)}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alive = [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive and not labelled("docker", run):
            break
        time.sleep(0.2)
    assert labelled("docker", run) == [] and labelled("docker", f"{run}-doomed") == []
    assert alive == [], [(p.pid, p.cmdline()) for p in alive]
    assert list((tmp_path / "scratch").iterdir()) == []
    under = [p.pid for p in psutil.process_iter() if _cwd(p).startswith(str(tmp_path))]
    assert under == []
    assert sum(counts.values()) >= 150


def _cwd(p: psutil.Process) -> str:
    try:
        return p.cwd()
    except psutil.Error:
        return ""


def test_warm_switch(docker_image: str, tmp_path: Path) -> None:
    """`sprawl-orch mcp --warm`: the commands of a run enter one kept container."""
    config = write_config(tmp_path, "docker", docker_image)
    run = f"warm-{secrets.token_hex(3)}"

    async def scenario() -> None:
        async with session(tmp_path, config, "--warm") as (client, _):
            exec_tool = next(t for t in (await client.list_tools()).tools if t.name == "exec")
            assert "Warm container" in (exec_tool.description or "")
            names = []
            for n in range(3):
                got = structured(
                    await client.call_tool(
                        "exec",
                        {"command": f"echo {n} > /tmp/{n}; ls /tmp | grep -x '[0-9]'", "run": run},
                    )
                )
                assert got["stdout"].split() == [str(n)], got["stdout"]
                names.append(got["container"]["name"])
            assert len(set(names)) == 1, names
            assert len(labelled("docker", run)) == 1  # kept between commands

    anyio.run(scenario)
    deadline = time.monotonic() + 60  # docker removes slowly while other suites run
    while labelled("docker", run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert labelled("docker", run) == []
