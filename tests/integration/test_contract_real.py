"""One result contract on every arm, by real commands (issue #13): docker, podman,
linux_namespaces (bwrap) and copied_tree through the ExecTool, and the CLI on the engines.

- a program that can't run is E_TOOL_UNAVAILABLE everywhere (one table, every arm);
- a halted command ends 137 everywhere, a command killed by signal N ends 128+N;
- HOME is writable inside the sandbox everywhere; PATH is the image's in containers;
- OOM kills and the pids limit are in the result and the statement (both engines);
- a host virtualenv in a container is named as such;
- a limit the host can't give is E_CONFIG_INVALID under auto, never a step-down;
- the CLI copies output byte for byte from a container.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.config import Config, parse_config
from sprawl_orch.container.admission import clear_cache
from sprawl_orch.runs.results import ExecResult
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import busybox_rootfs_tar, missing, remove_image
from tests.unit.test_unrunnable import make_venv, unrunnable_tree

ARMS = ["docker", "podman", "linux_namespaces", "copied_tree"]
ENGINES = ["docker", "podman"]


def config_for(
    tmp_path: Path, arm: str, request: pytest.FixtureRequest, **container: object
) -> Config:
    sandbox: dict[str, object] = {"scratch_dir": str(tmp_path / "scratch")}
    if arm in ENGINES:
        image = container.pop("image", None) or request.getfixturevalue(f"{arm}_image")
        sandbox.update(
            arm="container", container={"engine": arm, "images": {arm: image}, **container}
        )
    else:
        sandbox["arm"] = "native" if arm == "linux_namespaces" else "copied_tree"
    (tmp_path / "scratch").mkdir(exist_ok=True)
    return parse_config({"sandbox": sandbox, "state": {"dir": str(tmp_path / "state")}})


def open_tool(config: Config, tree: Path, arm: str) -> ExecTool:
    clear_cache()
    tool = ExecTool(config, tree)
    want = "container" if arm in ENGINES else arm
    if tool.choice.arm.value != want:
        tool.close()
        missing(f"the {arm} arm is not available here (chose {tool.choice.arm.value})")
    return tool


@pytest.fixture(params=ARMS)
def arm(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tool(arm: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    tree = tmp_path / "tree"
    tree.mkdir()
    with open_tool(config_for(tmp_path, arm, request), tree, arm) as t:
        yield t


def snapshot(root: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(root)): (
            str(p.readlink()) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
        )
        for p in sorted(root.rglob("*"))
    }


def test_a_program_that_cannot_run_is_tool_unavailable_on_every_arm(tool: ExecTool) -> None:
    cases = unrunnable_tree(tool.workdir)
    before = snapshot(tool.workdir)
    for program in cases:
        result = tool.exec([program])
        assert (result.outcome, result.code) == ("exceptional", "E_TOOL_UNAVAILABLE"), (
            program,
            result.exit_code,
            result.stderr,
            result.detail,
        )
        assert result.recovery and "shell arm" in result.recovery
        assert result.statement.startswith("E_TOOL_UNAVAILABLE")
    assert snapshot(tool.workdir) == before


def test_halt_and_signals_end_the_same_way_on_every_arm(tool: ExecTool, arm: str) -> None:
    started = tool.exec(["sleep", "60"], timeout=0.5)
    assert started.outcome == "backgrounded" and started.handle
    halted = tool.halt(started.handle)
    assert (halted.exit_code, halted.killed) == (137, True)
    # In a container the command is PID 1, which the kernel shields from its own unhandled
    # SIGTERM; a command that really died of signal N says 128+N on the other arms.
    if arm not in ENGINES:
        own = tool.exec(["sh", "-c", "kill -TERM $$"])
        assert own.exit_code == 128 + 15


def test_home_is_writable_inside_the_sandbox_on_every_arm(tool: ExecTool, arm: str) -> None:
    result = tool.exec(
        [
            "sh",
            "-c",
            'mkdir -p "$HOME/.cache/x" && echo ok > "$HOME/f" && cat "$HOME/f" && echo "$HOME"',
        ]
    )
    assert result.outcome == "settled" and result.exit_code == 0, result.stderr
    ok, home = result.stdout.split()
    assert ok == "ok" and "HOME" in result.env
    assert not Path(home).is_relative_to(tool.workdir)  # never in the person's tree
    if arm not in ENGINES and arm != "linux_namespaces":
        assert not Path(home).exists()  # the private HOME went with the command


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def path_image(engine: str, tmp_path: Path) -> Iterator[str]:
    """A busybox image whose config sets its own PATH."""
    tar = busybox_rootfs_tar(tmp_path / "rootfs")
    done = subprocess.run(
        [engine, "import", "--change", "ENV PATH=/bin:/image/own/bin", str(tar)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        missing(f"{engine} import failed: {done.stderr}")
    raw = done.stdout.strip().splitlines()[-1]
    image = raw if raw.startswith("sha256:") else f"sha256:{raw}"
    yield image
    remove_image(engine, image)


def test_path_is_the_images_not_the_hosts(
    engine: str, path_image: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    config = config_for(tmp_path, engine, request, image=path_image)
    with open_tool(config, tree, engine) as tool:
        tool.environ["PATH"] = "/host/pyenv/shims:/usr/bin:/bin"
        result = tool.exec(["sh", "-c", 'echo "$PATH"'])
    assert result.stdout == "/bin:/image/own/bin\n", result
    assert result.container is not None and result.container["path"] == "/bin:/image/own/bin"


def _said_in_the_json(result: ExecResult, words: str) -> None:
    # Issue 27: the JSON result's statement (confinement.statement) never said the limit.
    data = result.as_json_dict()
    assert words in data["confinement"]["statement"], data["confinement"]
    assert result.statement.count(words) == 1  # the human line does not repeat it


def test_oom_is_reported_on_both_engines(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    config = config_for(tmp_path, engine, request, memory_bytes=64 * 1024 * 1024)
    with open_tool(config, tree, engine) as tool:
        result = tool.exec(["sh", "-c", 'x=$(head -c 200000000 /dev/zero | tr "\\0" a)'])
        calm = tool.exec(["true"])
    assert result.limits_hit == ["memory"], result
    assert "Out of memory" in result.statement and "67108864 bytes" in result.statement
    _said_in_the_json(result, "Out of memory")
    assert calm.limits_hit == [] and "Out of memory" not in calm.statement


def test_the_pids_limit_is_reported_on_both_engines(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    config = config_for(tmp_path, engine, request, pids=8)
    with open_tool(config, tree, engine) as tool:
        result = tool.exec(
            ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 1 & done; wait"]
        )
        calm = tool.exec(["sh", "-c", "sleep 0.2 & sleep 0.2 & wait"])
    assert "can't fork" in result.stderr
    assert result.limits_hit == ["pids"], result
    assert "pids limit of 8" in result.statement
    _said_in_the_json(result, "pids limit of 8")
    assert calm.limits_hit == []


def test_a_host_virtualenv_in_a_container_is_named(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    make_venv(tree)
    with open_tool(config_for(tmp_path, engine, request), tree, engine) as tool:
        for program in ("./.venv/bin/python", "./tool.py"):
            result = tool.exec([program, "-c", "print(1)"])
            assert result.code == "E_TOOL_UNAVAILABLE", (program, result)
            assert "host virtualenv .venv/" in (result.detail or "")
            assert "python3 -m venv" in (result.recovery or "")


def test_a_limit_the_host_cannot_give_is_a_config_fault_under_auto(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    images = {e: request.getfixturevalue(f"{e}_image") for e in ENGINES}
    config = parse_config(
        {
            "sandbox": {
                "arm": "auto",
                "scratch_dir": str(tmp_path / "scratch"),
                "container": {"cpus": 100, "images": images},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    (tmp_path / "scratch").mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    clear_cache()
    with ExecTool(config, tree) as tool:
        result = tool.exec(["true"])
    assert (result.outcome, result.code) == ("exceptional", "E_CONFIG_INVALID"), result
    assert result.subject == "[sandbox.container] cpus"
    assert "cpus = 100" in (result.detail or "") and "apt-get" not in (result.recovery or "")


def test_the_cli_copies_a_containers_output_byte_for_byte(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    blob = bytes(range(256)) * 600 + b"\xff tail without newline"
    (tree / "image.png").write_bytes(blob)
    image = request.getfixturevalue(f"{engine}_image")
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "container"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[sandbox.container]\nengine = "{engine}"\n[sandbox.container.images]\n'
        f'{engine} = "{image}"\n[state]\ndir = "{tmp_path / "state"}"\n'
    )
    (tmp_path / "scratch").mkdir()
    cli = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]
    started = time.monotonic()
    done = subprocess.run(
        [*cli, "exec", "-C", str(tree), "cat", "image.png"],
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == blob
    assert b"sprawl-orch: Runs under container" in done.stderr
    refused = subprocess.run(
        [*cli, "exec", "-C", str(tree), "--json", "./image.png"],
        capture_output=True,
        timeout=180,
        check=False,
    )
    data = json.loads(refused.stdout)
    assert (refused.returncode, data["code"]) == (125, "E_TOOL_UNAVAILABLE")
    assert time.monotonic() - started < 170


def test_auto_names_every_engines_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead docker socket and a podman without its pin: the step-down names both."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'dead.sock'}")
    (tmp_path / "scratch").mkdir()
    (tmp_path / "tree").mkdir()
    config = parse_config(
        {
            "sandbox": {"arm": "auto", "scratch_dir": str(tmp_path / "scratch")},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    clear_cache()
    with ExecTool(config, tmp_path / "tree") as tool:
        result = tool.exec(["true"])
    assert result.outcome == "settled" and result.arm != "container"
    assert result.confinement is not None
    said = result.confinement.statement
    assert "docker:" in said and "dead.sock" in said, said
    assert "no image is pinned for podman ([sandbox.container.images] podman)" in said
