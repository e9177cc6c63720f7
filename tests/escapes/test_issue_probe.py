"""Issue #11's own escape, verbatim, through the CLI: under `arm = "native"` a command
connected to dockerd's socket and got `HTTP/1.0 200 OK` while its statement promised no
network. It must fail now, and the statement must say what held."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import PRIVATE_DOCKER_SOCK, missing

VERBATIM = (
    "import socket; s=socket.socket(socket.AF_UNIX); s.connect('/run/sprawl-orch/docker.sock');"
    " s.sendall(b'GET /_ping HTTP/1.0\\r\\n\\r\\n'); print(s.recv(60))"
)


def test_the_issue_probe_fails_inside_linux_namespaces(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    if not PRIVATE_DOCKER_SOCK.exists():
        missing(f"{PRIVATE_DOCKER_SOCK} is absent: the private dockerd is not running")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "native"\n[state]\ndir = "{tmp_path / "state"}"\n'
    )
    cli = Path(sys.executable).with_name("sprawl-orch")
    done = subprocess.run(
        [str(cli), "exec", "--json", "--", "python3", "-c", VERBATIM],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ},
    )
    result = json.loads(done.stdout)
    assert result["arm"] == "linux_namespaces", result
    assert result["outcome"] == "settled", result
    assert "200 OK" not in result["stdout"], result
    # Python ran and the socket call itself failed (not a missing python3: exit 127)
    assert result["exit_code"] == 1 and "Traceback" in result["stderr"], result
    assert "socket" in result["stderr"], result
    assert result["confinement"]["assurances"]["network"] == "yes"
    assert "no network connection out" in result["confinement"]["statement"]
