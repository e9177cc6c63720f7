"""The escape suite's `egress` class (issue 24): every arm, run with an allow-list, against
the ways out a proxy's peers were broken by. Each attack prints `ESC <id> ...` when it got
out; the host's own evidence decides too: a local upstream on 127.0.0.1 that counts every
request it serves (nothing on the host's loopback is listed, so any request there escaped).

Attacks (busybox sh, so the same script runs under bwrap, in busybox images and on gVisor):
dns (a resolver inside: DNS exfiltration, sandbox-runtime #88), tcp/udp straight to the
host's resolver and to the listed index's own address, an IP literal through the proxy
(#131), a listed name that resolves to loopback, plain HTTP whose Host names an unlisted
host. SNI differing from the CONNECT host needs a TLS client: tests/unit/test_egress_proxy.py
and, from inside, tests/integration/test_egress_bwrap.py.

Arms that cannot offer an allow-list (copied_tree, gVisor) must refuse it (E_SANDBOX_DENIED):
a refusal is the blocked verdict there. Warm containers and userns-remap docker carry it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.egress.netns import PROXY_PORT
from tests.egress.pip_index import pip_index
from tests.egress.upstream import Upstream, upstream
from tests.escapes.runner import config_data, landlock_data, open_tool
from tests.integration.conftest import missing

ARMS = (
    "linux_namespaces",
    "landlock",
    "docker",
    "podman",
    "podman-userns",
    "copied_tree",
    "docker-runsc",
    "podman-runsc",
    "podman-warm",
    "docker-warm",
    "docker-remap",
)
# No network namespace to hold the proxy's listener (egress/offer.py): refused, not widened.
REFUSING = {"copied_tree", "landlock", "docker-runsc", "podman-runsc"}


def _resolver() -> str:
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        if line.startswith("nameserver"):
            return line.split()[1]
    return "192.0.2.53"


def attack_script(up: Upstream, index_host: str, index_address: str) -> str:
    proxy = f"http://127.0.0.1:{PROXY_PORT}"
    port = up.port
    return f"""b=busybox
esc() {{ echo "ESC $*"; }}
not() {{ echo "NOT $*"; }}
try() {{ name=$1; shift; if "$@" </dev/null >/dev/null 2>&1; then esc $name; else not $name; fi; }}
try dns $b nslookup {index_host}
for t in "{_resolver()} 53" "{index_address} 443" "127.0.0.1 {port}"; do
  try "tcp $t" $b nc -w 3 $t
done
if echo x | $b nc -u -w 2 {_resolver()} 53 >/dev/null 2>&1; then esc udp; else not udp; fi
export http_proxy={proxy}
try ip-literal $b wget -q -O- http://127.0.0.1:{port}/
try loopback-name $b wget -q -O- http://localhost:{port}/
try plain-host $b wget -q -O- --header "Host: evil.example.org" http://{index_host}/
echo done
"""


@pytest.fixture
def counted() -> Iterator[Upstream]:
    with upstream(tls=False) as up:
        yield up


@pytest.mark.parametrize("arm", ARMS)
def test_egress_class(
    arm: str, tmp_path: Path, request: pytest.FixtureRequest, counted: Upstream
) -> None:
    _index, hosts = pip_index()
    address = socket.getaddrinfo(hosts[0], 443, type=socket.SOCK_STREAM)[0][4][0]
    scratch, state = tmp_path / "scratch", tmp_path / "state"
    scratch.mkdir()
    engine, _, variant = arm.partition("-")
    if arm == "docker-remap":
        env, image = request.getfixturevalue("docker_userns")
        request.getfixturevalue("monkeypatch").setenv("DOCKER_HOST", env["DOCKER_HOST"])
        data = config_data("container", scratch, state, (engine, image))
    elif engine in ("docker", "podman"):
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
    # The index is listed (so the plain-HTTP attack reaches the proxy's Host check, not the
    # list), and localhost on the upstream's port (it resolves to loopback, never listed).
    data["sandbox"]["network"] = {"allow": [*hosts, f"localhost:{counted.port}"]}
    tree = tmp_path / "tree"
    tree.mkdir()
    with open_tool(data, tree) as tool:
        if engine == "linux_namespaces" and tool.choice.arm.value != "linux_namespaces":
            missing(f"bwrap is not offered here: {tool.choice.reason()}")
        result = tool.exec(["sh", "-c", attack_script(counted, hosts[0], address)], timeout=300)
    if arm in REFUSING:
        assert result.outcome == "exceptional", result.stdout
        assert result.code is not None and result.code.value == "E_SANDBOX_DENIED"
        return
    out = result.stdout
    assert result.exit_code == 0 and "done" in out, result.as_json_dict()
    escaped = [line for line in out.splitlines() if line.startswith("ESC")]
    assert escaped == [], out
    assert out.count("NOT ") == 8, out
    assert result.network is not None
    refused = [e for e in result.network["egress"] if not e["allowed"]]
    reasons = sorted(e["reason"] for e in refused)
    assert len(reasons) == 3, result.network
    assert any("IP literal not in the allow list" in r for r in reasons), reasons
    assert any("localhost resolves to" in r and "loopback" in r for r in reasons), reasons
    assert any("Host header 'evil.example.org' differs" in r for r in reasons), reasons
    assert not any(e["allowed"] for e in result.network["egress"])
    assert counted.served() == 0  # the host's own evidence: nothing reached its loopback
