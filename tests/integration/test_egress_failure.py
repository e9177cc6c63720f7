"""The proxy's own failure, for real (issue 24, bad input): "ends the command's network, never
opens it, and the result says so" — on bwrap and on podman and docker.

1. Its loop dies mid-command: the command's first request goes through; the proxy's loop dies
   while deciding the second (SystemExit escaping on its thread, the way an asyncio loop
   really ends); the second fails, the third is refused at once (the listener closed), and a
   direct connection fails as before. The upstream answered once. The result carries
   `network.proxy_failure` and its statement says the network ended.
2. Its listener cannot be made (a port already taken inside the sandbox's namespace: the real
   listener_in called twice): the command is refused, E_SANDBOX_DENIED, and never ran.

The fault is injected by this test swapping `EgressProxy` / `listener_in` in
sprawl_orch.runs.proxied for the length of one test (pytest's monkeypatch, in this process);
the product reads no variable, file or option that could do the same.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.egress import netns
from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.rules import IpAddress
from sprawl_orch.runs import proxied
from sprawl_orch.runs.results import ExecResult
from tests.egress.upstream import BODY, Upstream, upstream
from tests.integration.conftest import missing


class _Dies(SystemExit):
    """SystemExit is what asyncio lets out of run_forever (other exceptions go to its handler)."""


class _DiesOnSecondConnection(EgressProxy):
    asked = 0

    async def resolve(self, host: str, port: int) -> list[IpAddress]:
        type(self).asked += 1
        if type(self).asked == 2:
            raise _Dies("the test killed the proxy's loop on the command's second connection")
        return await super().resolve(host, port)


@pytest.fixture
def plain_up() -> Iterator[Upstream]:
    with upstream(tls=False) as up:
        yield up


def _config(tmp_path: Path, arm: str, allow: list[str], image: str | None) -> Any:
    sandbox: dict[str, Any] = {"arm": "native", "network": {"allow": allow}}
    if arm != "bwrap":
        assert image is not None
        sandbox = {
            "arm": "container",
            "scratch_dir": str(tmp_path),
            "container": {"engine": arm, "images": {arm: image}},
            "network": {"allow": allow},
        }
    return parse_config({"sandbox": sandbox, "state": {"dir": str(tmp_path / "state")}})


def _run(tmp_path: Path, arm: str, image: str | None, up: Upstream, argv: list[str]) -> ExecResult:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    config = _config(tmp_path, arm, [f"localhost:{up.port}", "127.0.0.1", "::1"], image)
    with ExecTool(config, tree, record=False) as tool:
        return tool.exec(argv, window=300, background_ok=False)


def _fetches(arm: str, port: int) -> list[str]:
    """Three requests through the proxy, then a direct TCP connection to the upstream's
    address, each printing name=0 on success (bwrap runs the host's python3; the container
    images have busybox)."""
    if arm == "bwrap":
        script = (
            "import socket, urllib.request as u\n"
            "def attempt(name, do):\n"
            "    try:\n"
            "        do(); print(f'{name}=0', flush=True)\n"
            "    except Exception as err:\n"
            "        print(f'{name}=1 {err!r}', flush=True)\n"
            f"url = 'http://localhost:{port}/'\n"
            "for name in ('first', 'second', 'third'):\n"
            "    attempt(name, lambda: print(u.urlopen(url, timeout=20).read().decode()))\n"
            f"attempt('direct', lambda: socket.create_connection(('127.0.0.1', {port}), 5))\n"
        )
        return ["python3", "-c", script]
    url = f"http://localhost:{port}/"
    line = "".join(f"wget -q -O- {url}; echo {n}=$?; " for n in ("first", "second", "third"))
    line += f"nc -w 5 127.0.0.1 {port} </dev/null; echo direct=$?"
    return ["sh", "-c", line]


ARMS = ["bwrap", "podman", "docker"]


def _image(request: pytest.FixtureRequest, arm: str) -> str | None:
    if arm == "bwrap":
        if shutil.which("bwrap") is None:
            missing("bwrap is not installed (run .ci/setup-engines)")
        return None
    return str(request.getfixturevalue(f"{arm}_image"))


@pytest.mark.parametrize("arm", ARMS)
def test_a_proxy_dying_mid_command_ends_its_network(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    plain_up: Upstream,
    arm: str,
) -> None:
    image = _image(request, arm)
    _DiesOnSecondConnection.asked = 0
    monkeypatch.setattr(proxied, "EgressProxy", _DiesOnSecondConnection)
    result = _run(tmp_path, arm, image, plain_up, _fetches(arm, plain_up.port))
    out = result.stdout
    assert result.exit_code == 0, result.as_json_dict()
    assert BODY.decode() in out and "first=0" in out, out
    assert "second=0" not in out and "third=0" not in out and "direct=0" not in out, out
    assert all(f"{n}=" in out for n in ("second", "third", "direct")), out
    assert plain_up.served() == 1  # host-side: only the first request reached the upstream
    assert _DiesOnSecondConnection.asked == 2  # the third never reached a proxy
    assert result.network is not None
    failure = result.network.get("proxy_failure")
    assert failure and "loop died" in failure and "second connection" in failure
    assert "The proxy failed, which ended the network" in result.statement
    assert [(e["host"], e["allowed"]) for e in result.network["egress"]] == [("localhost", True)]


@pytest.mark.parametrize("arm", ARMS)
def test_a_proxy_that_cannot_listen_refuses_the_command(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    plain_up: Upstream,
    arm: str,
) -> None:
    image = _image(request, arm)
    taken: list[socket.socket] = []

    def port_taken(pid: int) -> socket.socket:
        # The real listener, made twice in the same namespace: the second bind finds the
        # port in use, as a proxy port already taken inside the sandbox would.
        taken.append(netns.listener_in(pid))
        return netns.listener_in(pid)

    monkeypatch.setattr(proxied, "listener_in", port_taken)
    marker = "the command ran"
    argv = ["sh", "-c", f"echo {marker}"]
    try:
        result = _run(tmp_path, arm, image, plain_up, argv)
    finally:
        for sock in taken:
            sock.close()
    assert taken, "the listener was never asked for"
    assert result.outcome == "exceptional", result.as_json_dict()
    assert result.code is not None and result.code.value == "E_SANDBOX_DENIED"
    assert result.detail is not None and "could not make the proxy's listener" in result.detail
    assert "Address already in use" in result.detail or "EADDRINUSE" in result.detail
    assert marker not in (result.stdout or "")
    assert plain_up.served() == 0
