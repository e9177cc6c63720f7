"""run -> review changes -> apply through a real `sprawl-orch serve` subprocess (issue #18), and
through the CLI: `sprawl-orch exec` then `sprawl-orch apply --dry-run` / `apply` in later
processes, the way a harness without Python uses it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("one\n")
    (tree / "b.txt").write_text("two\n")
    (tmp_path / "scratch").mkdir()
    config = tmp_path / "sprawl.toml"
    config.write_text(
        f'[sandbox]\narm = "copied_tree"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    return tree, config


def test_apply_through_serve(tmp_path: Path) -> None:
    tree, config = _tree(tmp_path)
    proc = subprocess.Popen(
        [*CLI, "serve", "-C", str(tree), "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        assert answer["id"] == request["id"] and answer["ok"], answer
        return answer

    try:
        ran = ask(
            {
                "id": 1,
                "op": "exec",
                "shell": True,
                "command": "echo ONE > a.txt; echo three > c.txt; rm b.txt",
            }
        )
        changes = ran["result"]["changes"]
        assert {(p["path"], p["change"]) for p in changes["paths"]} == {
            ("a.txt", "modified"),
            ("c.txt", "created"),
            ("b.txt", "deleted"),
        }
        handle = changes["handle"]
        dry = ask({"id": 2, "op": "apply", "handle": handle, "dry_run": True})["result"]
        assert "-one\n+ONE\n" in dry["diff"] and (tree / "a.txt").read_text() == "one\n"
        part = ask({"id": 3, "op": "apply", "handle": handle, "paths": ["c.txt"]})["result"]
        assert [i["path"] for i in part["applied"]] == ["c.txt"]
        assert {i["path"] for i in part["skipped"]} == {"a.txt", "b.txt"}
        rest = ask({"id": 4, "op": "apply", "handle": handle})["result"]
        assert {i["path"] for i in rest["applied"]} == {"a.txt", "b.txt"} and rest["finished"]
        assert (
            (tree / "a.txt").read_text() == "ONE\n"
            and (tree / "c.txt").read_text() == "three\n"
            and not (tree / "b.txt").exists()
        )
        gone = {"id": 5, "op": "apply", "handle": handle}
        proc.stdin.write(json.dumps(gone) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert not answer["ok"] and answer["error"]["code"] == "E_UNKNOWN_HANDLE"
        assert "applied" in answer["error"]["detail"]
    finally:
        proc.stdin.close()
        assert proc.wait(60) == 0


def test_apply_through_the_cli(tmp_path: Path) -> None:
    tree, config = _tree(tmp_path)
    base = ["-C", str(tree), "--config", str(config)]
    ran = subprocess.run(
        [*CLI, "exec", *base, "--json", "--shell", "echo ONE > a.txt"],
        capture_output=True,
        text=True,
        check=True,
    )
    handle = json.loads(ran.stdout)["changes"]["handle"]
    dry = subprocess.run(
        [*CLI, "apply", "--config", str(config), "--dry-run", handle],
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    assert "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n" in dry.stdout
    assert (tree / "a.txt").read_text() == "one\n"
    (tree / "a.txt").write_text("mine\n")  # the person edits it meanwhile: a conflict
    refused = subprocess.run(
        [*CLI, "apply", "--config", str(config), handle], capture_output=True, text=True
    )
    assert refused.returncode == 1 and "conflict" in refused.stderr
    assert "when the command's copy was made" in refused.stderr
    assert (tree / "a.txt").read_text() == "mine\n"
