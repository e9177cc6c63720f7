"""`sprawl-orch mcp` bounds a message line (issue 30 break 8): a line over
--max-request-bytes is answered with a JSON-RPC error naming the limit (E_BAD_REQUEST), the
request is never echoed, and the server goes on answering the next line."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path


def test_mcp_refuses_an_oversize_line_and_keeps_serving(tmp_path: Path) -> None:
    token = secrets.token_hex(16)
    (tmp_path / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\n[state]\ndir = "{tmp_path / "state"}"\n'
    )
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"x": token * 100_000}}
    init = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bound-test", "version": "0"},
        },
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("sprawl-orch")),
            *("mcp", "-C", str(tmp_path), "--max-request-bytes", "1048576"),
        ],
        input=json.dumps(big) + "\n" + json.dumps(init) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert lines, done.stderr[-2000:]
    refused = lines[0]
    assert refused["id"] is None and refused["error"]["code"] == -32600
    assert "E_BAD_REQUEST" in refused["error"]["message"]
    assert "over the limit of 1048576 bytes" in refused["error"]["message"]
    assert any(r.get("id") == 2 and "result" in r for r in lines), lines  # still serving
    assert token not in done.stdout and token not in done.stderr
