"""The escape suite's `secrets` class (issue 25): on every arm, a command with a secret bound to
a local TLS upstream tries to read the value itself — every process's environ and cmdline it
can see, the files under /run, /tmp, $HOME and its working directory (where a CA key or a
bundle with a key would be), core files — and asks the bound upstream, which echoes requests,
to hand it back. The host judges: the value never appears in what the command printed, and
no private key is found. Arms without the proxy (copied_tree, landlock, gVisor, warm) must refuse a
secret (E_SANDBOX_DENIED), never pass it in plain."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from tests.escapes.runner import config_data, landlock_data
from tests.escapes.test_egress import ARMS, REFUSING
from tests.integration.conftest import missing
from tests.secrets.echo import Echo, echo_upstream

VALUE = "sk_live_" + "Qv4" * 12


def probe(port: int) -> str:
    return f"""b=busybox
echo "env: $GH_PAT"
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  $b cat "$f" 2>/dev/null | $b tr '\\0' ' '; echo
done
for d in /run /tmp "$HOME" . /var/run /etc/ssl; do
  $b find "$d" -xdev -type f 2>/dev/null | while read -r f; do
    if $b grep -q "PRIVATE KEY" "$f" 2>/dev/null; then echo "KEY $f"; fi
  done
done
$b find / -xdev -name 'core*' -type f 2>/dev/null | $b head -n 20 | while read -r f; do
  $b strings "$f" 2>/dev/null | $b head -c 4096
done
export https_proxy=http://127.0.0.1:3128
$b wget -q -O- --header "Authorization: Bearer $GH_PAT" https://localhost:{port}/echo 2>&1
echo; $b cat "$SSL_CERT_FILE" 2>/dev/null | $b grep -c "BEGIN CERTIFICATE"
echo x >> "$SSL_CERT_FILE" 2>/dev/null && echo "ESC bundle-writable"
echo done
"""


@pytest.fixture
def bound() -> Iterator[Echo]:
    with echo_upstream(trustme.CA()) as up:
        yield up


@pytest.mark.parametrize("arm", ARMS)
def test_secrets_class(
    arm: str, tmp_path: Path, request: pytest.FixtureRequest, bound: Echo
) -> None:
    scratch, state = tmp_path / "scratch", tmp_path / "state"
    scratch.mkdir()
    engine, _, variant = arm.partition("-")
    if engine in ("docker", "podman"):
        image = str(request.getfixturevalue(f"{engine}_image"))
        runtime = "runsc" if variant == "runsc" else None
        data = config_data("container", scratch, state, (engine, image), runtime)
        if variant == "warm":
            data["sandbox"]["container"]["warm"] = True
        if variant == "userns":
            data["sandbox"]["container"]["userns"] = "required"
    elif arm == "linux_namespaces":
        data = config_data("native", scratch, state)
    elif arm == "landlock":
        data = landlock_data(scratch, state)
    else:
        data = config_data("copied_tree", scratch, state)
    data["sandbox"]["network"] = {"allow": [f"localhost:{bound.port}", "127.0.0.1", "::1"]}
    data["sandbox"]["secrets"] = {"GH_PAT": {"hosts": [f"localhost:{bound.port}"]}}
    tree = tmp_path / "tree"
    tree.mkdir()
    environ = {**os.environ, "GH_PAT": VALUE, "SSL_CERT_FILE": str(bound.ca_file(tmp_path))}
    with ExecTool(parse_config(data), tree, environ=environ) as tool:
        if arm == "linux_namespaces" and tool.choice.arm.value != "linux_namespaces":
            missing(f"bwrap is not offered here: {tool.choice.reason()}")
        result = tool.exec(["sh", "-c", probe(bound.port)], window=300)
    everything = repr(result.as_json_dict())
    assert VALUE not in everything
    # A warm container refuses secrets too (docs/secrets.md: its mounts are fixed at creation,
    # the per-command bundle can't join them), since the house merge (#28) on main.
    if arm in REFUSING or variant == "warm":
        assert result.outcome == "exceptional", result.stdout
        assert result.code is not None and result.code.value == "E_SANDBOX_DENIED"
        assert bound.seen == []
        return
    out = result.stdout
    assert result.exit_code == 0 and "done" in out, result.as_json_dict()
    assert "env: SPRAWL_PLACEHOLDER_GH_PAT_" in out
    # (The command's own cmdline, printed above, holds these words too: whole lines only.)
    found = [line for line in out.splitlines() if line.startswith(("KEY /", "ESC bundle"))]
    assert found == [], out
    # Whatever reached the bound upstream carried the value (busybox's wget sends an https URL
    # to a proxy as a plain GET, which the proxy refuses: then nothing did).
    for seen in bound.seen:
        assert seen.headers["authorization"] == f"Bearer {VALUE}"


def test_the_probe_finds_a_value_passed_in_plain(tmp_path: Path, bound: Echo) -> None:
    """Control: the same probe, the value passed the old way (`credentials`), does print it —
    the class above can fail."""
    scratch, state = tmp_path / "scratch", tmp_path / "state"
    scratch.mkdir()
    data = config_data("native", scratch, state)
    data["sandbox"]["network"] = {"allow": [f"localhost:{bound.port}", "127.0.0.1", "::1"]}
    data["sandbox"]["credentials"] = ["GH_PAT"]
    tree = tmp_path / "tree"
    tree.mkdir()
    environ = {**os.environ, "GH_PAT": VALUE}
    with ExecTool(parse_config(data), tree, environ=environ) as tool:
        if tool.choice.arm.value != "linux_namespaces":
            missing(f"bwrap is not offered here: {tool.choice.reason()}")
        result = tool.exec(["sh", "-c", probe(bound.port)], window=300)
    assert f"env: {VALUE}" in result.stdout
