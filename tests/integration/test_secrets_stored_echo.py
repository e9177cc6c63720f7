"""A stored echo across two commands, for real (bwrap with curl; docker and podman with the
python recipe's Python): the first sends `Basic base64(oauth2:placeholder)` to a bound host
that keeps request heads (a request bin); the second, a new run with a new placeholder,
fetches the last one. The re-encoded blob was scrubbed only by the run that sent it: the
second command printed it, one `base64 -d` away from the value."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from tests.integration.conftest import missing
from tests.integration.test_egress_pip_containers import python_ids  # noqa: F401 (fixture)
from tests.secrets.raw import raw_upstream
from tests.secrets.test_attacks_forms import _decoded_blobs

VALUE = "ghp_stored/" + "Wm5" * 10 + "+x"

PY_STORE = """
import base64, os, urllib.request
blob = base64.b64encode(("oauth2:" + os.environ["GH_PAT"]).encode()).decode()
url = "https://localhost:{port}/store"
req = urllib.request.Request(url, headers={{"Authorization": "Basic " + blob}})
print(urllib.request.urlopen(req, timeout=60).read().decode())
"""
PY_LAST = """
import urllib.request
print(urllib.request.urlopen("https://localhost:{port}/last", timeout=60).read().decode())
"""


def _stored(head: bytes, earlier: list[bytes]) -> bytes:
    body = earlier[-1] if b"GET /last" in head and earlier else b"ok"
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body


@pytest.mark.parametrize("arm", ["native", "docker", "podman"])
def test_a_stored_basic_echo_does_not_reach_the_next_command(
    tmp_path: Path, request: pytest.FixtureRequest, arm: str
) -> None:
    sandbox: dict[str, object] = {"arm": "native"}
    if arm == "native" and shutil.which("bwrap") is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    if arm != "native":
        ids = request.getfixturevalue("python_ids")
        sandbox = {"arm": "container", "container": {"engine": arm, "images": {arm: ids[arm]}}}
    with raw_upstream(_stored) as up:
        tree = tmp_path / "tree"
        tree.mkdir()
        where = f"localhost:{up.port}"
        config = parse_config(
            {
                "sandbox": {
                    **sandbox,
                    "scratch_dir": str(tmp_path / "scratch"),
                    "network": {"allow": [where, "127.0.0.1", "::1"], "trust": "host"},
                    "secrets": {"GH_PAT": {"hosts": [where]}},
                },
                "state": {"dir": str(tmp_path / "state")},
            }
        )
        environ = {**os.environ, "GH_PAT": VALUE, "SSL_CERT_FILE": str(up.ca_file(tmp_path))}
        if arm == "native":
            store = f'curl -sS -u "oauth2:$GH_PAT" https://{where}/store'
            last = f"curl -sS https://{where}/last"
        else:
            store = f"python3 -c '{PY_STORE.format(port=up.port)}'"
            last = f"python3 -c '{PY_LAST.format(port=up.port)}'"
        with ExecTool(config, tree, environ=environ) as tool:
            first = tool.exec(["sh", "-c", store], window=300)
            second = tool.exec(["sh", "-c", last], window=300)
    assert first.exit_code == 0 and second.exit_code == 0, (first.stderr, second.stderr)
    sent = base64.b64encode(f"oauth2:{VALUE}".encode()).decode()
    assert any(sent.encode() in head for head in up.heads)  # the bound host got the value
    out = second.stdout
    assert "authorization" in out.lower(), out  # the stored echo did come back
    assert sent not in out and VALUE.encode() not in _decoded_blobs(out.encode()), out
    assert VALUE not in repr(second.as_json_dict())
