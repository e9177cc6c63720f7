"""[sandbox.network] allow on bwrap (linux_namespaces), for real: a confined `pip download`
from the index pip itself uses here works when its hosts are listed and is refused when not;
every egress attack from inside is refused and what the proxy saw is in the result."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.egress.netns import PROXY_PORT
from sprawl_orch.egress.plan import host_bundle
from sprawl_orch.runs.results import ExecResult
from tests.egress import attacks
from tests.egress.pip_index import pip_download_argv, pip_index
from tests.egress.upstream import Upstream, upstream
from tests.integration.conftest import missing


@pytest.fixture(scope="module")
def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    return found


def run(tmp_path: Path, allow: list[str], argv: list[str], trust: str = "image") -> ExecResult:
    config = parse_config(
        {
            "sandbox": {"arm": "native", "network": {"allow": allow, "trust": trust}},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    with ExecTool(config, work) as tool:
        return tool.exec(argv, timeout=600)


def test_pip_download_through_the_proxy(bwrap: str, tmp_path: Path) -> None:
    index, hosts = pip_index()
    bundle = host_bundle({"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"})
    assert bundle is not None
    listed = run(tmp_path, list(hosts), pip_download_argv(index, str(bundle), "dl"), "host")
    assert listed.exit_code == 0, listed.stderr
    assert "Saved" in listed.stdout
    assert listed.network is not None
    assert listed.network["possible"] == "allow-list" and listed.network["egress_dropped"] == 0
    seen = {(e["host"], e["allowed"]) for e in listed.network["egress"]}
    assert seen == {(h, True) for h in hosts}
    assert all(e["bytes_down"] > 0 for e in listed.network["egress"])
    assert "through sprawl-orch's proxy; data can leave to those hosts" in listed.statement
    assert listed.confinement is not None
    assert listed.confinement.assurances["network"] == "no"

    unlisted = run(
        tmp_path, ["example.invalid"], pip_download_argv(index, str(bundle), "dl"), "host"
    )
    assert unlisted.exit_code != 0
    assert unlisted.network is not None
    refused = [e for e in unlisted.network["egress"] if not e["allowed"]]
    assert refused and {e["host"] for e in refused} <= set(hosts)
    assert all("not in the allow list" in e["reason"] for e in refused)
    assert "0 connection(s) allowed" in unlisted.statement


def test_the_result_says_what_was_possible_without_an_allow_list(
    bwrap: str, tmp_path: Path
) -> None:
    config = parse_config({"sandbox": {"arm": "native"}, "state": {"dir": str(tmp_path / "state")}})
    work = tmp_path / "work"
    work.mkdir()
    with ExecTool(config, work) as tool:
        confined = tool.exec(["true"])
        on_host = tool.exec(["true"], where="host")
    assert confined.exit_code == 0 and confined.network == {"possible": "none"}
    assert on_host.exit_code == 0 and on_host.network == {"possible": "any"}


@pytest.fixture
def tls_up() -> Iterator[Upstream]:
    with upstream(tls=True) as up:
        yield up


def _resolver() -> str:
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        if line.startswith("nameserver"):
            return line.split()[1]
    return "8.8.8.8"


def test_attacks_from_inside_are_refused(bwrap: str, tmp_path: Path, tls_up: Upstream) -> None:
    _index, hosts = pip_index()
    argv = attacks.argv(
        "/usr/bin/python3",
        name=hosts[0],
        resolver=_resolver(),
        proxy_port=PROXY_PORT,
        # The host's own loopback upstream, the index's address, the resolver, by TCP.
        tcp=[["127.0.0.1", tls_up.port], ["8.8.8.8", 53], [_resolver(), 53]],
        ip_target=f"127.0.0.1:{tls_up.port}",
        loopback_target=f"localhost:{tls_up.port}",
        plain_url=f"http://localhost:{tls_up.port}/",
    )
    # localhost is listed but resolves to loopback, which is not.
    result = run(tmp_path, [f"localhost:{tls_up.port}", *hosts], argv)
    assert result.exit_code == 0, result.stderr
    assert attacks.escaped(result.stdout) == {}
    assert result.network is not None
    said = [(e["kind"], e["host"], e["reason"]) for e in result.network["egress"]]
    assert not any(e["allowed"] for e in result.network["egress"])
    assert [r for k, h, r in said if h == "127.0.0.1"] == [
        f"127.0.0.1:{tls_up.port} an IP literal not in the allow list"
    ]
    assert any(k == "connect" and h == "localhost" and "loopback" in r for k, h, r in said)
    assert any(k == "http" and "Host header 'evil.example.org'" in r for k, h, r in said)


def test_cli_names_refused_attempts_on_stderr(bwrap: str, tmp_path: Path, tls_up: Upstream) -> None:
    """Human mode (issue 24 item 4): a refused attempt is named on stderr, with its reason,
    after the statement's summary line."""
    import subprocess
    import sys

    tree = tmp_path / "tree"
    tree.mkdir()
    config = tmp_path / "sprawl.toml"
    config.write_text(
        '[sandbox]\narm = "native"\n[sandbox.network]\nallow = ["example.invalid"]\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    fetch = (
        "import urllib.request as u\n"
        f"try: u.urlopen('http://localhost:{tls_up.port}/', timeout=30)\n"
        "except Exception as err: print('refused:', err)\n"
    )
    cli = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]
    done = subprocess.run(
        [*cli, "exec", "-C", str(tree), "--config", str(config), "python3", "-c", fetch],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: HTTP Error 403" in done.stdout
    assert "0 connection(s) allowed, 1 refused" in done.stderr
    said = f"sprawl-orch: egress refused: http localhost:{tls_up.port}: localhost:{tls_up.port} "
    assert said + "not in the allow list" in done.stderr, done.stderr
