"""[sandbox.network] allow on the container arm, for real: rootful podman (runc), with and
without --userns=auto, reaches a listed local upstream through the proxy's listener made
inside the container's network namespace after `podman init`; an unlisted host, a DNS
lookup and a direct connection are refused. Docker (no `init`) holds the program behind a
gate until the listener exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.runs.results import ExecResult
from tests.egress.upstream import BODY, Upstream, upstream


@pytest.fixture
def plain_up() -> Iterator[Upstream]:
    with upstream(tls=False) as up:
        yield up


def _run(
    tmp_path: Path, engine: str, image: str, allow: list[str], argv: list[str], **container: Any
) -> ExecResult:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    config = parse_config(
        {
            "sandbox": {
                "arm": "container",
                "scratch_dir": str(tmp_path),
                "container": {"engine": engine, "images": {engine: image}, **container},
                "network": {"allow": allow},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    with ExecTool(config, tree, record=False) as tool:
        return tool.exec(argv, timeout=300)


def _resolver() -> str:
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        if line.startswith("nameserver"):
            return line.split()[1]
    return "8.8.8.8"


@pytest.mark.parametrize(
    ("engine", "userns"), [("docker", "off"), ("podman", "off"), ("podman", "required")]
)
def test_container_reaches_only_what_is_listed(
    request: pytest.FixtureRequest, tmp_path: Path, plain_up: Upstream, engine: str, userns: str
) -> None:
    image = request.getfixturevalue(f"{engine}_image")
    url = f"http://localhost:{plain_up.port}/"
    line = (
        f"wget -q -O- {url}; echo wget=$?; "
        "wget -q -O- http://evil.example.org/ ; echo unlisted=$?; "
        "nslookup example.org; echo dns=$?; "
        f"nc -w 5 {_resolver()} 53 </dev/null; echo tcp=$?; "
        f"nc -w 5 127.0.0.1 {plain_up.port} </dev/null; echo loop=$?"
    )
    result = _run(
        tmp_path,
        engine,
        image,
        [f"localhost:{plain_up.port}", "127.0.0.1", "::1"],
        ["sh", "-c", line],
        userns=userns,
    )
    out = result.stdout
    assert result.exit_code == 0, result.as_json_dict()
    assert BODY.decode() in out and "wget=0" in out
    assert "unlisted=1" in out and "dns=0" not in out
    assert "tcp=0" not in out and "loop=0" not in out
    assert result.network is not None
    kinds = [(e["host"], e["allowed"]) for e in result.network["egress"]]
    # Records come in the order connections *ended*: the plain forward ends when the upstream
    # closes, which under load came after the next connection's refusal (seen once, podman).
    assert sorted(kinds) == [("evil.example.org", False), ("localhost", True)]
    assert result.confinement is not None
    assert result.confinement.assurances["network"] == "no"
    assert "through sprawl-orch's proxy" in result.statement
    assert result.container is not None and result.container["removed"]
    if userns == "required":
        assert result.container["userns"] == "podman-auto"


def test_gvisor_refuses_an_allow_list(podman_image: str, tmp_path: Path) -> None:
    """runsc's guest loopback is gVisor's own netstack: a listener in the sandbox's host-side
    namespace is never reached, so the arm refuses rather than hand out a dead proxy."""
    result = _run(tmp_path, "podman", podman_image, ["example.org"], ["true"], runtime="runsc")
    assert result.outcome == "exceptional", result.as_json_dict()
    assert result.code is not None and result.code.value == "E_SANDBOX_DENIED"
    assert result.detail is not None and "gVisor" in result.detail


def test_copied_tree_refuses_an_allow_list(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    config = parse_config(
        {
            "sandbox": {"arm": "copied_tree", "network": {"allow": ["example.org"]}},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    with ExecTool(config, tree, record=False) as tool:
        result = tool.exec(["true"])
    assert result.outcome == "exceptional"
    assert result.code is not None and result.code.value == "E_SANDBOX_DENIED"
    assert result.detail is not None and "no network namespace" in result.detail


def test_auto_steps_down_past_a_container_that_cannot_carry_the_list(
    podman_image: str, tmp_path: Path, plain_up: Upstream
) -> None:
    """arm = "auto" (issue 24, bad input): a container that can't carry the allow-list (here
    gVisor) is stepped past to the first arm that can — bwrap — and the statement says what
    was stepped past and why; the listed upstream is reached through the proxy."""
    tree = tmp_path / "tree"
    tree.mkdir()
    config = parse_config(
        {
            "sandbox": {
                "arm": "auto",
                "scratch_dir": str(tmp_path),
                "container": {
                    "engine": "podman",
                    "images": {"podman": podman_image},
                    "runtime": "runsc",
                },
                "network": {"allow": [f"localhost:{plain_up.port}", "127.0.0.1", "::1"]},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    fetch = (
        f"import urllib.request as u; print(u.urlopen('http://localhost:{plain_up.port}/').read())"
    )
    with ExecTool(config, tree, record=False) as tool:
        result = tool.exec(["python3", "-c", fetch], window=300)
    assert result.exit_code == 0, result.as_json_dict()
    assert result.arm == "linux_namespaces"
    assert BODY.decode().strip() in result.stdout
    said = result.statement
    assert "Stepped down: the container arm (podman) cannot carry [sandbox.network] allow" in said
    assert "gVisor" in said and "through sprawl-orch's proxy" in said
    assert result.network is not None and result.network["possible"] == "allow-list"
    assert [(e["host"], e["allowed"]) for e in result.network["egress"]] == [("localhost", True)]


def test_userns_remap_docker_reaches_only_what_is_listed(
    tmp_path: Path,
    plain_up: Upstream,
    docker_userns: tuple[dict[str, str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docker with userns-remap: the container's root is a subordinate host uid, the gate's
    FIFO and the busybox are readable to it, the listener is made by root's thread."""
    env, image = docker_userns
    monkeypatch.setenv("DOCKER_HOST", env["DOCKER_HOST"])
    url = f"http://localhost:{plain_up.port}/"
    line = (
        f"wget -q -O- {url}; echo wget=$?; wget -q -O- http://evil.example.org/; echo unlisted=$?"
    )
    result = _run(
        tmp_path,
        "docker",
        image,
        [f"localhost:{plain_up.port}", "127.0.0.1", "::1"],
        ["sh", "-c", line],
    )
    assert result.exit_code == 0, result.as_json_dict()
    assert BODY.decode() in result.stdout and "wget=0" in result.stdout
    assert "unlisted=1" in result.stdout
    assert result.container is not None and result.container["userns"] == "docker-remap"
    assert result.network is not None
    kinds = [(e["host"], e["allowed"]) for e in result.network["egress"]]
    # In the order connections ended (see test_container_reaches_only_what_is_listed).
    assert sorted(kinds) == [("evil.example.org", False), ("localhost", True)]


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_warm_container_carries_the_list_per_command(
    request: pytest.FixtureRequest, tmp_path: Path, plain_up: Upstream, engine: str
) -> None:
    """warm = true: each command exec'd into the kept container gets its own listener and
    proxy (made before the exec, closed after its processes are killed): both commands reach
    the listed upstream, each result names only its own connections, and the second runs
    in the same container as the first."""
    image = request.getfixturevalue(f"{engine}_image")
    tree = tmp_path / "tree"
    tree.mkdir()
    config = parse_config(
        {
            "sandbox": {
                "arm": "container",
                "scratch_dir": str(tmp_path),
                "container": {"engine": engine, "images": {engine: image}, "warm": True},
                "network": {"allow": [f"localhost:{plain_up.port}", "127.0.0.1", "::1"]},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    url = f"http://localhost:{plain_up.port}/"
    with ExecTool(config, tree, record=False) as tool:
        first = tool.exec(["sh", "-c", f"wget -q -O- {url}; echo wget=$?"], window=300)
        second = tool.exec(
            ["sh", "-c", f"wget -q -O- {url}?2; wget -q -O- http://evil.example.org/; echo $?"],
            window=300,
        )
    for result in (first, second):
        assert result.exit_code == 0, result.as_json_dict()
        assert BODY.decode() in result.stdout
        assert result.container is not None and result.container["warm"]
        assert "through sprawl-orch's proxy" in result.statement
    assert second.container is not None and second.container["reused"]
    assert first.network is not None and second.network is not None
    assert [(e["host"], e["allowed"]) for e in first.network["egress"]] == [("localhost", True)]
    assert [(e["host"], e["allowed"]) for e in second.network["egress"]] == [
        ("localhost", True),
        ("evil.example.org", False),
    ]
