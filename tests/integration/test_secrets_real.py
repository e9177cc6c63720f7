"""Issue 25 end to end, for real: bwrap (native), docker and podman (runc), each running curl
(where the image has it) and Python inside against two TLS upstreams on 127.0.0.1 that echo
what they receive. The bound one receives the value; the other, allowed but unbound, the
placeholder; the command's environment, output, copy and every file sprawl-orch wrote hold
only the placeholder; the CA bundle inside cannot be written."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.runs.results import ExecResult
from tests.integration.conftest import missing
from tests.integration.test_egress_pip_containers import python_ids  # noqa: F401 (fixture)
from tests.secrets.echo import Echo, echo_upstream
from tests.secrets.git_server import git_server

VALUE = "ghp_" + "Zq8" * 12  # what the host holds; must appear nowhere but at the bound upstream

PYTHON = """
import json, os, urllib.request
ph = os.environ["GH_PAT"]
for port in ({bound}, {other}):
    req = urllib.request.Request(
        f"https://localhost:{{port}}/py", headers={{"Authorization": "token " + ph}}
    )
    print("PY", urllib.request.urlopen(req, timeout=60).read().decode())
open("copied.txt", "w").write(ph)
print("ENV", json.dumps(dict(os.environ)))
try:
    open(os.environ["SSL_CERT_FILE"], "a").write("# planted")
    print("BUNDLE WRITABLE")
except OSError as err:
    print("bundle not writable", err.errno)
"""


@pytest.fixture
def ups() -> Iterator[tuple[Echo, Echo]]:
    ca = trustme.CA()
    with echo_upstream(ca) as bound, echo_upstream(ca) as other:
        yield bound, other


def _run(
    tmp_path: Path,
    ups: tuple[Echo, Echo],
    sandbox: dict[str, object],
    line: str,
    trust: str = "image",
) -> ExecResult:
    bound, other = ups
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    config = parse_config(
        {
            "sandbox": {
                **sandbox,
                "scratch_dir": str(tmp_path / "scratch"),
                "network": {
                    "allow": [
                        f"localhost:{bound.port}",
                        f"localhost:{other.port}",
                        "127.0.0.1",
                        "::1",
                    ],
                    "trust": trust,
                },
                "secrets": {"GH_PAT": {"hosts": [f"localhost:{bound.port}"]}},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    # The upstreams' CA is what the host trusts for them (the proxy verifies the real host
    # against the caller's SSL_CERT_FILE, as the host's Python would).
    environ = {**os.environ, "GH_PAT": VALUE, "SSL_CERT_FILE": str(bound.ca_file(tmp_path))}
    with ExecTool(config, tree, environ=environ) as tool:
        return tool.exec(["sh", "-c", line], window=300)


def _judge(tmp_path: Path, ups: tuple[Echo, Echo], result: ExecResult, curl: bool) -> None:
    bound, other = ups
    assert result.exit_code == 0, result.as_json_dict()
    got = {s.headers.get("authorization") for s in bound.seen}
    assert got == ({f"token {VALUE}", f"Bearer {VALUE}"} if curl else {f"token {VALUE}"})
    assert other.seen and all(VALUE not in repr(s.headers) for s in other.seen)
    ph = other.seen[0].headers["authorization"].split()[1]
    assert ph.startswith("SPRAWL_PLACEHOLDER_GH_PAT_")
    out = result.stdout + result.stderr
    assert VALUE not in out and f'"GH_PAT": "{ph}"' in out
    assert "bundle not writable" in out and "BUNDLE WRITABLE" not in out
    # The echo of the bound host came back as the command wrote it.
    assert f"token {ph}" in out
    said = (
        f"GH_PAT reaches only localhost:{bound.port}, injected by sprawl-orch; "
        "the command saw a placeholder"
    )
    assert said in result.statement
    assert result.network is not None
    secrets = result.network["secrets"]
    injected = [(i["host"], i["secret"]) for i in secrets["injected"]]
    assert injected == [(f"localhost:{bound.port}", "GH_PAT")]
    assert VALUE not in repr(result.as_json_dict())
    # Every file sprawl-orch wrote (state, ledger, outputs, kept changes, the copy, scratch).
    leaked = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and not p.is_symlink() and VALUE.encode() in p.read_bytes()
    ]
    assert leaked == []
    copies = [p for p in tmp_path.rglob("copied.txt") if p.is_file()]
    assert copies and all(p.read_text() == ph for p in copies)


def test_secrets_on_bwrap(tmp_path: Path, ups: tuple[Echo, Echo]) -> None:
    if shutil.which("bwrap") is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    bound, other = ups
    curl = (
        f'curl -sS -H "Authorization: Bearer $GH_PAT" https://localhost:{bound.port}/curl; echo; '
        f'curl -sS -H "Authorization: Bearer $GH_PAT" https://localhost:{other.port}/curl; echo; '
    )
    script = PYTHON.format(bound=bound.port, other=other.port)
    result = _run(tmp_path, ups, {"arm": "native"}, curl + f"/usr/bin/python3 -c '{script}'")
    _judge(tmp_path, ups, result, curl=True)


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_secrets_on_containers(
    tmp_path: Path,
    ups: tuple[Echo, Echo],
    python_ids: dict[str, str],  # noqa: F811 (the fixture imported above)
    engine: str,
) -> None:
    bound, other = ups
    script = PYTHON.format(bound=bound.port, other=other.port)
    sandbox = {
        "arm": "container",
        "container": {"engine": engine, "images": {engine: python_ids[engine]}},
    }
    # trust = "host": the unbound upstream's CA is the host's (SSL_CERT_FILE), not the image's
    # (trust = "image" is test_secrets_image_real.py's, with a CA only the image holds).
    result = _run(tmp_path, ups, sandbox, f"python3 -c '{script}'", trust="host")
    _judge(tmp_path, ups, result, curl=False)


@pytest.mark.parametrize("arm", ["native", "docker", "podman"])
def test_git_clone_with_basic_auth(
    tmp_path: Path, request: pytest.FixtureRequest, arm: str
) -> None:
    """`git clone https://user:$GH_PAT@host/repo.git` inside the sandbox (git's libcurl): git
    sends the placeholder in Basic credentials after the server's 401, the proxy swaps it
    inside the base64, the server (which demands the real value) serves the clone."""
    if shutil.which("git") is None:
        missing("git is needed on the host (the test's server runs git http-backend)")
    sandbox: dict[str, object] = {"arm": "native"}
    if arm == "native" and shutil.which("bwrap") is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    if arm != "native":
        ids = request.getfixturevalue("python_ids")
        sandbox = {"arm": "container", "container": {"engine": arm, "images": {arm: ids[arm]}}}
    ca = trustme.CA()
    served = tmp_path / "served"
    served.mkdir()
    with git_server(ca, served, "x-access-token", VALUE) as git:
        tree = tmp_path / "tree"
        tree.mkdir()
        config = parse_config(
            {
                "sandbox": {
                    **sandbox,
                    "scratch_dir": str(tmp_path / "scratch"),
                    "network": {"allow": [f"localhost:{git.port}", "127.0.0.1", "::1"]},
                    "secrets": {"GH_PAT": {"hosts": [f"localhost:{git.port}"]}},
                },
                "state": {"dir": str(tmp_path / "state")},
            }
        )
        ca_file = tmp_path / "git-ca.pem"
        ca_file.write_bytes(ca.cert_pem.bytes())
        environ = {**os.environ, "GH_PAT": VALUE, "SSL_CERT_FILE": str(ca_file)}
        url = f"https://x-access-token:$GH_PAT@localhost:{git.port}/repo.git"
        line = f'git clone -q "{url}" cloned && cat cloned/README'
        with ExecTool(config, tree, environ=environ) as tool:
            result = tool.exec(["sh", "-c", line], window=300)
    assert result.exit_code == 0, result.as_json_dict()
    assert "served through the proxy" in result.stdout
    sent = base64.b64encode(f"x-access-token:{VALUE}".encode()).decode()
    assert f"Basic {sent}" in git.seen
    assert VALUE not in repr(result.as_json_dict())
    leaked = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and p.parent != served and VALUE.encode() in p.read_bytes()
    ]
    assert leaked == []
