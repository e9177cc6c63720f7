"""Warm mode on real docker and podman (issue 15): every guarantee of a fresh container,
proved per command by real commands — a `setsid`/double-forked process left by command N is
gone before N+1 starts (looked for from the host), files left in /tmp and /dev/shm are gone,
the copy is resynced, the idle init is out of the command's reach, a backgrounded command
gets its own container, an OOM kill is reported for the command that caused it, a container
killed from outside is replaced and said so, and the guardian removes an idle warm container
when its owner is SIGKILLed. About 60 s for both engines.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch.config import Config, parse_config
from sprawl_orch.tool.exec_tool import ExecTool

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20


def make_config(tmp: Path, engine: str, image: str, **container: object) -> Config:
    (tmp / "scratch").mkdir(exist_ok=True)
    return parse_config(
        {
            "sandbox": {
                "arm": "container",
                "scratch_dir": str(tmp / "scratch"),
                "window_seconds": 60,
                "container": {
                    "engine": engine,
                    "images": {engine: image},
                    "warm": True,
                    **container,
                },
            },
            "state": {"dir": str(tmp / "state")},
        }
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    return root


def session_containers(engine: str, session: str) -> list[str]:
    done = subprocess.run(
        [engine, "ps", "-aq", "--filter", f"label=sprawl.session={session}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def host_processes(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


@pytest.fixture
def warm_tool(
    engine_image: tuple[str, str],
    tmp_path: Path,
    tree: Path,
) -> Iterator[tuple[str, ExecTool]]:
    engine, image = engine_image
    tool = ExecTool(make_config(tmp_path, engine, image), tree, record=False)
    try:
        yield engine, tool
    finally:
        tool.close()
        assert session_containers(engine, tool.session) == []
        assert list((tmp_path / "scratch").iterdir()) == []


def test_each_command_starts_clean(warm_tool: tuple[str, ExecTool], tree: Path) -> None:
    _, tool = warm_tool
    n = 300_000 + secrets.randbelow(99_999)  # this test's own sleep lengths, found by cmdline
    first = tool.exec(
        f"setsid sleep {n} & (sh -c 'sleep {n + 1} &' &); "
        "echo left > /tmp/left; mkdir /tmp/d; chmod 0 /tmp/d; echo shm > /dev/shm/left; "
        "echo made > made.txt; cat a.txt",
        shell=True,
    )
    assert first.outcome == "settled" and first.exit_code == 0, first
    assert first.stdout == "one\n" and first.container and first.container["warm"] is True
    # Gone before the next command starts: looked for from the host, by command line.
    assert host_processes(f"sleep {n}") == [] and host_processes(f"sleep {n + 1}") == []

    (tree / "a.txt").write_text("two\n")
    second = tool.exec("ps -o args; ls -A /tmp /dev/shm; ls made.txt; cat a.txt", shell=True)
    assert second.container and second.container["name"] == first.container["name"]
    assert second.container["reused"] is True and "replaced" not in second.container
    assert f"sleep {n}" not in second.stdout
    assert "left" not in second.stdout and "/tmp/d" not in second.stdout
    assert "made.txt" in second.stderr  # the copy was resynced: the file is not in the tree
    assert second.stdout.endswith("two\n"), second.stdout
    assert (tree / "a.txt").read_text() == "two\n" and not (tree / "made.txt").exists()


def test_the_idle_init_is_out_of_reach(warm_tool: tuple[str, ExecTool]) -> None:
    _, tool = warm_tool
    tool.exec(["true"])
    tried = tool.exec("kill -9 -1; kill -KILL 1 || echo refused; id -u", shell=True)
    assert "refused" in tried.stdout and tried.stdout.strip().endswith("65534"), tried
    after = tool.exec(["true"])
    assert after.exit_code == 0 and after.container and "replaced" not in after.container
    assert after.container["name"] == tried.container["name"]  # type: ignore[index]


def test_background_gets_its_own_container_and_halt(warm_tool: tuple[str, ExecTool]) -> None:
    engine, tool = warm_tool
    slow = tool.exec(["sleep", "30"], timeout=0.5)
    assert slow.outcome == "backgrounded" and slow.handle
    quick = tool.exec(["echo", "hi"])
    assert quick.stdout == "hi\n"
    halted = tool.halt(slow.handle)
    assert halted.killed and halted.container and quick.container
    assert halted.container["name"] != quick.container["name"]
    # the idle containers are left (one per copy); nothing else of the session
    assert len(session_containers(engine, tool.session)) <= 2


def test_replaced_when_killed_from_outside(warm_tool: tuple[str, ExecTool]) -> None:
    engine, tool = warm_tool
    first = tool.exec(["true"])
    assert first.container
    subprocess.run([engine, "kill", first.container["name"]], capture_output=True, check=True)
    second = tool.exec(["echo", "ok"])
    assert second.stdout == "ok\n" and second.container
    assert "replaced" in second.container, second.container
    assert second.container["name"] != first.container["name"]


def test_oom_is_reported_for_the_command_that_caused_it(
    engine_image: tuple[str, str], tmp_path: Path, tree: Path
) -> None:
    engine, image = engine_image
    tool = ExecTool(make_config(tmp_path, engine, image, memory_bytes=48 * MIB), tree, record=False)
    try:
        assert tool.exec(["true"]).exit_code == 0
        hog = tool.exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=96M", "count=1"])
        assert hog.exit_code == 137 and hog.container and hog.container["oom_killed"], hog
        after = tool.exec(["echo", "fine"])
        assert after.stdout == "fine\n" and after.container
        assert after.container["oom_killed"] is False
    finally:
        tool.close()


GUARDED = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sprawl_orch.config import parse_config
    from sprawl_orch.tool.exec_tool import ExecTool
    engine, image, tmp = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    config = parse_config({"sandbox": {"arm": "container", "scratch_dir": str(tmp / "scratch"),
        "container": {"engine": engine, "images": {engine: image}, "warm": True}},
        "state": {"dir": str(tmp / "state")}})
    tool = ExecTool(config, tmp / "tree", record=False)
    print(tool.exec(["true"]).container["name"], tool.session, flush=True)
    time.sleep(600)
""")


def test_guardian_removes_an_idle_warm_container(
    engine_image: tuple[str, str], tmp_path: Path, tree: Path
) -> None:
    engine, image = engine_image
    (tmp_path / "scratch").mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", GUARDED, engine, image, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    assert owner.stdout is not None
    name, session = owner.stdout.readline().split()
    assert session_containers(engine, session), "the warm container should be idle now"
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 30
    while session_containers(engine, session) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_containers(engine, session) == [], f"{name} outlived its owner"


def test_a_program_that_cannot_run_is_refused_and_nothing_ran(
    warm_tool: tuple[str, ExecTool],
) -> None:
    _, tool = warm_tool
    first = tool.exec(["true"])
    missing = tool.exec(["no-such-program"])
    assert missing.outcome == "exceptional" and missing.code == "E_TOOL_UNAVAILABLE", missing
    not_exec = tool.exec(["./a.txt"])
    assert not_exec.code == "E_TOOL_UNAVAILABLE", not_exec
    after = tool.exec(["echo", "still"])
    assert after.stdout == "still\n" and after.container and first.container
    assert after.container["name"] == first.container["name"]


def test_podman_warm_keeps_its_user_namespace(
    podman_image: str, tmp_path: Path, tree: Path
) -> None:
    """Warm mode on rootful podman --userns=auto: the kept container keeps its map, each
    command's files belong to its mapped host uid (not a host account), and the user axis is
    claimed for every command. (A rootless caller is refused: test_rootless.py.)"""
    from sprawl_orch.container.userns import principal_problem, subordinate

    reserved = subordinate("containers", Path("/etc/subuid"))
    assert reserved, "no 'containers' range in /etc/subuid (run .ci/setup-engines)"
    tool = ExecTool(
        make_config(tmp_path, "podman", podman_image, userns="required"), tree, record=False
    )
    try:
        done = [tool.exec("touch made; id -u", shell=True).as_json_dict() for _ in range(2)]
    finally:
        tool.close()
    assert session_containers("podman", tool.session) == []
    for r in done:
        assert r["exit_code"] == 0 and r["stdout"] == "65534\n", r
        assert r["confinement"]["assurances"]["user"] == "yes", r["confinement"]
        assert r["container"]["userns"] == "podman-auto" and r["container"]["warm"]
    first, second = (r["container"] for r in done)
    assert second["reused"] and second["name"] == first["name"]
    owner = int(str(first["host_owner"]).split(":")[0])
    assert second["host_owner"] == first["host_owner"]
    assert any(owner in r for r in reserved) and principal_problem(owner) is None, owner
    made = list((tmp_path / "state").glob("copies/*/*/tree/made"))
    assert made and all(p.stat().st_uid == owner for p in made), made
    assert not (tree / "made").exists()


def test_sysv_ipc_objects_are_removed_and_counted(warm_tool: tuple[str, ExecTool]) -> None:
    """The reset reads the container's IPC namespace (warm_host.ipc_objects) and runs ipcrm
    only when it holds something: objects made there (from the host, as busybox has no
    ipcmk: the namespace is what counts) are counted, removed after the next command, and
    the container stays warm."""
    from sprawl_orch.container.warm_host import ipc_objects

    engine, tool = warm_tool
    first = tool.exec(["true"])
    assert first.container is not None
    name = str(first.container["name"])
    pid = subprocess.run(
        [engine, "inspect", "-f", "{{.State.Pid}}", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert ipc_objects(int(pid)) == 0
    for kind in ("-M", "-Q", "-S"):
        made = [kind, "4096"] if kind == "-M" else ([kind, "1"] if kind == "-S" else [kind])
        subprocess.run(["nsenter", "-t", pid, "--ipc", "ipcmk", *made], check=True)
    assert ipc_objects(int(pid)) == 3
    second = tool.exec(["true"])
    assert second.container and second.container["name"] == name
    assert "replaced_after" not in second.container, second.container
    assert ipc_objects(int(pid)) == 0
    listed = subprocess.run(
        ["nsenter", "-t", pid, "--ipc", "ipcs"], capture_output=True, text=True, check=True
    ).stdout
    assert "0x" not in listed, listed  # every key gone


def test_replaced_when_its_limits_were_changed_from_outside(
    docker_image: str, tmp_path: Path, tree: Path
) -> None:
    """The check before reuse re-reads the container from the engine (asked while the host's
    own checks run, read before the command enters): an idle container whose memory limit
    was raised by `docker update` is not entered, it is replaced and the result says why."""
    tool = ExecTool(make_config(tmp_path, "docker", docker_image), tree, record=False)
    try:
        first = tool.exec(["true"])
        assert first.container
        name = str(first.container["name"])
        raised = ["--memory", "900m", "--memory-swap", "900m"]
        subprocess.run(["docker", "update", *raised, name], capture_output=True, check=True)
        second = tool.exec(["echo", "ok"])
        assert second.stdout == "ok\n" and second.container
        assert "no longer matches what was asked" in str(second.container.get("replaced"))
        assert second.container["name"] != name
    finally:
        tool.close()


def test_a_refused_program_leaves_no_exec_made_ahead(
    docker_image: str, tmp_path: Path, tree: Path
) -> None:
    """docker's exec is created while the checks before reuse run (warm._create_ahead), but
    only for a program found in the container: a refused one leaves no unstarted exec in
    the daemon's record of the kept container, and the container stays warm."""
    tool = ExecTool(make_config(tmp_path, "docker", docker_image), tree, record=False)

    def execs(name: str) -> int:
        said = subprocess.run(
            ["docker", "inspect", "-f", "{{json .ExecIDs}}", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return 0 if said == "null" else len(json.loads(said))

    try:
        first = tool.exec(["true"])
        assert first.container
        name = str(first.container["name"])
        before = execs(name)
        refused = tool.exec(["sprawl-no-such-program"])
        assert refused.outcome == "exceptional" and refused.code == "E_TOOL_UNAVAILABLE", refused
        assert execs(name) == before
        after = tool.exec(["echo", "ok"])
        assert after.stdout == "ok\n" and after.container and after.container["name"] == name
    finally:
        tool.close()
