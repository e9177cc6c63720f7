"""The interception on the host (no sandbox): a real proxy, a real TLS upstream on 127.0.0.1,
real curl and Python clients. The bound host gets the value, every other one the placeholder;
an echo comes back scrubbed; a placeholder in the URL or body is counted, never swapped."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import Rules
from sprawl_orch.secrets.intercept import Interception
from sprawl_orch.secrets.run import SecretRun
from sprawl_orch.secrets.spec import Spec
from tests.secrets.echo import Echo, echo_upstream

VALUE = "ghp_real_value_" + "7" * 20


@pytest.fixture
def ups() -> Iterator[tuple[Echo, Echo]]:
    ca = trustme.CA()
    with echo_upstream(ca) as bound, echo_upstream(ca) as other:
        yield bound, other


def _proxy(
    bound: Echo, other: Echo, tmp_path: Path, **spec: str
) -> tuple[EgressProxy, SecretRun, Path]:
    run = SecretRun(
        (
            Spec(
                name="GH_PAT",
                hosts=Rules.parse((f"localhost:{bound.port}",)),
                host_list=(f"localhost:{bound.port}",),
                value=VALUE,
                **spec,  # type: ignore[arg-type]
            ),
        ),
        upstream_cafile=str(bound.ca_file(tmp_path)),
    )
    rules = Rules.parse((f"localhost:{bound.port}", f"localhost:{other.port}", "127.0.0.1"))
    proxy = EgressProxy(rules, secrets=Interception(run))
    proxy.start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    proxy.serve(listener)
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(bound.ca.cert_pem.bytes() + run.ca.pem)
    proxy.port = listener.getsockname()[1]  # type: ignore[attr-defined]
    return proxy, run, bundle


def _curl(proxy: EgressProxy, bundle: Path, url: str, *args: str) -> str:
    curl = shutil.which("curl")
    assert curl is not None
    done = subprocess.run(
        [
            curl,
            "-sS",
            "--proxy",
            f"http://127.0.0.1:{proxy.port}",
            "--cacert",
            str(bundle),
            *args,
            url,
        ],  # type: ignore[attr-defined]
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_bound_host_gets_the_value_others_the_placeholder(
    ups: tuple[Echo, Echo], tmp_path: Path
) -> None:
    bound, other = ups
    proxy, run, bundle = _proxy(bound, other, tmp_path)
    ph = run.env()["GH_PAT"]
    try:
        said = _curl(
            proxy,
            bundle,
            f"https://localhost:{bound.port}/a",
            "-H",
            f"Authorization: Bearer {ph}",
            "--http2",
        )
        elsewhere = _curl(
            proxy, bundle, f"https://localhost:{other.port}/b", "-H", f"Authorization: Bearer {ph}"
        )
        basic = _curl(
            proxy, bundle, f"https://localhost:{bound.port}/c", "-u", f"x-access-token:{ph}"
        )
        in_url = _curl(
            proxy, bundle, f"https://localhost:{bound.port}/d?token={ph}", "-d", f"t={ph}"
        )
    finally:
        proxy.close()
    # What the upstreams received (host-side evidence).
    assert bound.seen[0].headers["authorization"] == f"Bearer {VALUE}"
    assert other.seen[0].headers["authorization"] == f"Bearer {ph}"
    user = base64.b64decode(bound.seen[1].headers["authorization"].split()[1]).decode()
    assert user == f"x-access-token:{VALUE}"
    assert ph in bound.seen[2].path and ph.encode() in bound.seen[2].body
    # What the command got back: the echo scrubbed to the placeholder.
    for text in (said, elsewhere, basic, in_url):
        assert VALUE not in text
    assert json.loads(said)["headers"]["authorization"] == f"Bearer {ph}"
    # An echoed Basic header comes back as the command wrote it (the value's base64 form too).
    echoed = json.loads(basic)["headers"]["authorization"].split()[1]
    assert base64.b64decode(echoed).decode() == f"x-access-token:{ph}"
    report = run.report()
    injected = {(i["host"], i["requests"]) for i in report["injected"]}
    assert injected == {(f"localhost:{bound.port}", 2)}
    wheres = sorted(leak["where"] for leak in report["attempted_leaks"])
    assert wheres == ["request body (never swapped)", "url (never swapped)"]
    assert report["echoes_scrubbed"] == {f"localhost:{bound.port}": 2}
    assert VALUE not in json.dumps(report) + repr(proxy.records())
    assert [r.allowed for r in proxy.records()] == [True] * 4


def test_python_client_and_configured_header(ups: tuple[Echo, Echo], tmp_path: Path) -> None:
    bound, other = ups
    proxy, run, bundle = _proxy(bound, other, tmp_path, header="X-Api-Key", format="token {value}")
    try:
        ctx = ssl.create_default_context(cafile=str(bundle))
        handler = urllib.request.ProxyHandler({"https": f"http://127.0.0.1:{proxy.port}"})  # type: ignore[attr-defined]
        opener = urllib.request.build_opener(handler, urllib.request.HTTPSHandler(context=ctx))
        got = opener.open(f"https://localhost:{bound.port}/py", timeout=60).read()
    finally:
        proxy.close()
    assert bound.seen[0].headers["x-api-key"] == f"token {VALUE}"
    assert VALUE.encode() not in got and run.env()["GH_PAT"].encode() in got


def test_unverifiable_upstream_is_cut(ups: tuple[Echo, Echo], tmp_path: Path) -> None:
    """The real host is verified: an upstream the host's trust store doesn't vouch for never
    receives the value."""
    bound, other = ups
    proxy, run, bundle = _proxy(bound, other, tmp_path)
    run.upstream_cafile = None  # the system store: trustme's CA is not in it
    try:
        curl = shutil.which("curl")
        assert curl is not None
        done = subprocess.run(
            [
                curl,
                "-sS",
                "--proxy",
                f"http://127.0.0.1:{proxy.port}",
                "--cacert",
                str(bundle),
                "-H",
                f"Authorization: {run.env()['GH_PAT']}",
                f"https://localhost:{bound.port}/",
            ],  # type: ignore[attr-defined]
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        proxy.close()
    assert done.returncode != 0
    assert bound.seen == []
    assert "failed TLS verification" in proxy.records()[0].reason


def test_a_host_header_naming_another_host_is_refused(
    ups: tuple[Echo, Echo], tmp_path: Path
) -> None:
    """Domain fronting one layer above SNI: CONNECT to the bound host, then a request whose
    Host names another (a CDN would route the value there). Refused; nothing reaches it."""
    bound, other = ups
    proxy, run, bundle = _proxy(bound, other, tmp_path)
    ph = run.env()["GH_PAT"]
    curl = shutil.which("curl")
    assert curl is not None
    try:
        done = subprocess.run(
            [
                curl,
                "-sS",
                "--proxy",
                f"http://127.0.0.1:{proxy.port}",
                "--cacert",
                str(bundle),  # type: ignore[attr-defined]
                "-H",
                f"Authorization: Bearer {ph}",
                "-H",
                "Host: evil.example.org",
                f"https://localhost:{bound.port}/",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        proxy.close()
    assert done.returncode != 0
    assert bound.seen == []
    assert "Host must name the tunnel's host" in proxy.records()[0].reason
    assert not proxy.records()[0].allowed


def test_a_placeholder_in_plain_http_is_counted_not_swapped() -> None:
    from tests.egress.upstream import upstream

    with upstream(tls=False) as plain:
        run = SecretRun(
            (
                Spec(
                    name="GH_PAT",
                    hosts=Rules.parse((f"localhost:{plain.port}",)),
                    host_list=(f"localhost:{plain.port}",),
                    value=VALUE,
                ),
            ),
        )
        proxy = EgressProxy(
            Rules.parse((f"localhost:{plain.port}", "127.0.0.1")), secrets=Interception(run)
        )
        proxy.start()
        listener = socket.create_server(("127.0.0.1", 0))
        proxy.serve(listener)
        ph = run.env()["GH_PAT"]
        curl = shutil.which("curl")
        assert curl is not None
        try:
            done = subprocess.run(
                [
                    curl,
                    "-sS",
                    "--proxy",
                    f"http://127.0.0.1:{listener.getsockname()[1]}",
                    "-H",
                    f"Authorization: Bearer {ph}",
                    f"http://localhost:{plain.port}/?t={ph}",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            proxy.close()
    assert done.returncode == 0, done.stderr
    wheres = sorted(leak["where"] for leak in run.report()["attempted_leaks"])
    assert wheres == [
        "plain HTTP header authorization (never swapped)",
        "plain HTTP url (never swapped)",
    ]
    assert run.report()["injected"] == []
