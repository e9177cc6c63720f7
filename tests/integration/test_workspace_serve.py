"""Workspaces through a real `sprawl-orch serve` subprocess (JSON lines) on docker, podman and
linux_namespaces (issue 23): exec with "workspace": true keeps the agent's edit for its next
command; the person's edit flows in; while a backgrounded command of the workspace runs the
person's edits are held back (and said so), and flow in once it is halted; a both-changed
file is a named conflict with both versions kept, and workspace_apply holds it back (serve
never applies a conflict: an agent can't consent for the person) while applying the rest."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import missing
from tests.integration.test_mcp_real import write_config

CLI = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]


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


def test_the_flow_through_serve(config: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    before = files(tree)
    run = f"ws-{secrets.token_hex(3)}"
    proc = subprocess.Popen(
        [*CLI, "serve", "-C", str(tree), "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ids = iter(range(1, 1000))

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        request = {"id": next(ids), **request}
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        assert answer["id"] == request["id"] and answer["ok"], answer
        result: dict[str, Any] = answer.get("result", answer)
        return result

    def ex(line: str, window: float | None = None) -> dict[str, Any]:
        request: dict[str, Any] = {"op": "exec", "command": line, "shell": True, "run": run}
        request["workspace"] = True
        if window is not None:
            request["window"] = window
        got = ask(request)
        if got.get("code") in ("E_TOOL_UNAVAILABLE", "E_SANDBOX_DENIED"):
            missing(f"the arm is not available here: {got.get('detail')}")
        assert got["background"] or got["exit_code"] == 0, got
        return got

    try:
        ex("sed -i 's/return 1/return 11/' pkg/more.py; echo agent > t2.txt")
        assert files(tree) == before  # the person's tree is untouched
        assert ex("grep -c 'return 11' pkg/more.py; cat t2.txt")["stdout"] == "1\nagent\n"
        (tree / "README").write_text("the person's readme\n")
        assert ex("cat README")["stdout"] == "the person's readme\n"
        # A server in the background: the person's next edit waits until it has stopped.
        server = ex("sleep 120", window=0.5)
        assert server["background"] and server["handle"], server
        (tree / "README").write_text("the person's second readme\n")
        held = ex("cat README")
        assert held["stdout"] == "the person's readme\n"
        assert "held back" in str(held["changes"]["note"]), held
        halted = ask({"op": "halt", "handle": server["handle"]})
        assert halted["killed"], halted
        assert ex("cat README")["stdout"] == "the person's second readme\n"
        # Both change one file: a named conflict, both versions kept.
        (tree / "pkg" / "more.py").write_text("def one():\n    return 1.0\n")
        note = str(ex("true")["changes"]["note"])
        assert "conflicts" in note and "pkg/more.py" in note, note
        assert ex("grep -c 'return 11' pkg/more.py")["stdout"] == "1\n"  # the agent's stays
        dry = ask({"op": "workspace_apply", "run": run, "dry_run": True})
        assert "+    return 11" in str(dry["diff"]), dry
        # Named by path, the conflict is still held: serve never takes an agent's consent.
        done = ask({"op": "workspace_apply", "run": run, "paths": ["pkg/more.py", "t2.txt"]})
        assert [i["path"] for i in done["applied"]] == ["t2.txt"], done
        assert [(i["path"], i["change"]) for i in done["refused"]] == [("pkg/more.py", "conflict")]
        assert files(tree) == {
            **before,
            "README": "the person's second readme\n",
            "pkg/more.py": "def one():\n    return 1.0\n",
            "t2.txt": "agent\n",
        }
        assert ask({"op": "workspace_discard", "run": run})["run"] == run
        # Discarded: the next workspace command starts from the person's tree.
        assert ex("grep -c 'return 1.0' pkg/more.py")["stdout"] == "1\n"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(120) == 0


def test_state_deleted_between_commands_is_said_once_then_made_afresh(
    config: Path, tmp_path: Path
) -> None:
    """The workspace's state deleted between two commands of one serve: the next says it is
    gone (never pretends the agent's work is there), and the one after starts afresh, as
    that refusal says (it stayed "gone" for every later command of the run)."""
    tree = tmp_path / "tree"
    proc = subprocess.Popen(
        [*CLI, "serve", "-C", str(tree), "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ids = iter(range(1, 1000))

    def ex(line: str) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        request = {"id": next(ids), "op": "exec", "command": line, "shell": True}
        proc.stdin.write(json.dumps({**request, "run": "r", "workspace": True}) + "\n")
        proc.stdin.flush()
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        got: dict[str, Any] = answer.get("result", answer)
        if got.get("code") in ("E_TOOL_UNAVAILABLE", "E_SANDBOX_DENIED"):
            missing(f"the arm is not available here: {got.get('detail')}")
        return got

    try:
        person = sorted(p.name for p in tree.iterdir())
        assert ex("echo agent > agent-only.txt")["exit_code"] == 0
        subprocess.run(["rm", "-rf", str(tmp_path / "state" / "workspaces")], check=True)
        gone = ex("cat agent-only.txt")
        assert gone["code"] == "E_STORAGE_FATAL" and "is gone" in gone["detail"], gone
        assert "afresh" in gone["recovery"], gone
        fresh = ex("ls")
        assert fresh["exit_code"] == 0 and fresh["stdout"].split() == person, fresh
        assert "made now from the person's tree" in str(fresh["changes"]["note"]), fresh
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(120) == 0
