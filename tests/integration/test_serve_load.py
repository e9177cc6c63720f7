"""200 commands through a real `sprawl-orch serve` subprocess, 8 at a time, over every arm this
machine has; then stdin closes. Counted before and after, printed, and asserted equal: sprawl
containers, scratch copies, processes, cgroups, and the server's open file descriptors.

Arms: copied_tree, where=host, native (bwrap) when native_fallbacks.bwrap exists and a user
namespace can be made, container (docker) when the arm exists and docker answers (a missing
engine fails in CI). Per-run cgroups (memory ceiling) are on when this host delegates them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from sprawl_orch.runs.cgroups import PlatformShares, delegation
from tests.integration.conftest import busybox_image, engine_problem, in_ci, remove_image

REPO = Path(__file__).resolve().parents[2]
N = 200
PARALLEL = 8
MIB = 2**20


def arms_here() -> tuple[list[str], str | None]:
    arms = ["copied_tree", "host"]
    bwrap_module = importlib.util.find_spec("sprawl_orch.native_fallbacks.bwrap")
    if bwrap_module is not None and shutil.which("bwrap"):
        from sprawl_orch.native_fallbacks.bwrap import user_namespace_works

        if user_namespace_works(shutil.which("bwrap") or "bwrap")[0]:
            arms.append("native")
    image = None
    if importlib.util.find_spec("sprawl_orch.container.arm") is not None:
        problem = engine_problem("docker")
        if problem is None:
            image = busybox_image("docker")
            arms.append("container")
        elif in_ci():
            pytest.fail(f"docker is not usable here: {problem}")
        else:
            print(f"no container arm in this load: docker: {problem}")
    return arms, image


class Client:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.responses: dict[Any, dict[str, Any]] = {}
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            answer = json.loads(line)
            with self.cond:
                self.responses[answer["id"]] = answer
                self.cond.notify_all()

    def send(self, **request: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def wait(self, rid: Any, timeout: float = 60) -> dict[str, Any]:
        with self.cond:
            assert self.cond.wait_for(lambda: rid in self.responses, timeout), f"no answer {rid}"
            return self.responses[rid]

    def ask(self, rid: Any, **request: Any) -> dict[str, Any]:
        self.send(id=rid, **request)
        return self.wait(rid)

    def in_flight(self, sent: list[Any]) -> int:
        with self.cond:
            return sum(1 for rid in sent if rid not in self.responses)


def docker_sprawl_containers(label: str = "sprawl.session") -> int:
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return len(done.stdout.split())


def cgroup_dirs(session: str | None = None) -> int:
    found = delegation()
    count = 0
    for parent in found.parents.values():
        base = parent / "sprawl-orch"
        if session is not None:
            base = base / session
        if base.is_dir():
            count += 1 + sum(1 for p in base.rglob("*") if p.is_dir())
    return count


def fds(pid: int) -> dict[str, str]:
    """fd -> what it points at (pipe:[…], socket:[…], a path)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            found[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return found


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.Error:
            pass
    return left


def command_for(i: int) -> tuple[str, list[str], float | None, str]:
    """(kind, argv, window, run) of the i-th command."""
    if i % 20 == 5:
        return "harvest", ["sh", "-c", f"sleep 0.3; echo late-{i}"], 0.05, f"run-{i % 3}"
    if i % 50 == 7:
        return "halt", ["sh", "-c", "sleep 61 & sleep 62; wait"], 0.05, f"run-{i % 3}"
    if i % 40 == 9:
        return "release", ["sh", "-c", "sleep 63 & wait"], 0.05, "doomed"
    return "quick", ["sh", "-c", f"echo {i}; ls > /dev/null"], None, f"run-{i % 3}"


@pytest.fixture
def load(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    arms, image = arms_here()
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    for n in range(20):
        (tree / "src" / f"f{n}.txt").write_text(f"file {n}\n" * 50)
    config = tmp_path / "sprawl.toml"
    lines = [
        "[sandbox]",
        'arm = "copied_tree"',
        f'scratch_dir = "{tmp_path / "scratch"}"',
        "window_seconds = 30",
        "[state]",
        f'dir = "{tmp_path / "state"}"',
    ]
    if image:
        lines += [
            "[sandbox.container]",
            'engine = "docker"',
            "[sandbox.container.images]",
            f'docker = "{image}"',
        ]
    config.write_text("\n".join(lines) + "\n")
    (tmp_path / "scratch").mkdir()
    try:
        yield arms, tmp_path
    finally:
        if image:
            remove_image("docker", image)


# bwrap's `--ro-bind / /` copies the mount table while docker adds and removes overlay mounts
# for the containers of this same load (containers/bubblewrap#650); the native arm retries its
# probe on it, a command fails with exit 1 and these words. Counted and printed, not hidden.
BWRAP_RACE = "Can't bind mount /oldroot/ on /newroot/"


def bwrap_raced(result: dict[str, Any]) -> bool:
    return (
        result["arm"] == "linux_namespaces"
        and result["exit_code"] == 1
        and BWRAP_RACE in result["stderr"]
    )


def one_round(
    client: Client,
    arms: list[str],
    first: int,
    count: int,
    delegated: bool,
    seen: list[psutil.Process],
) -> tuple[dict[str, int], int]:
    """`count` execs, 8 at a time; then halt, release and harvest until the backlog is empty.
    Returns the commands per arm (bwrap's mount races as "bwrap mount race") and the number
    of harvest requests."""
    sent: list[int] = []
    kinds: dict[int, str] = {}
    for i in range(first, first + count):
        while client.in_flight(sent) >= PARALLEL:
            time.sleep(0.002)
        kind, command, window, run = command_for(i)
        arm = arms[i % len(arms)]
        request: dict[str, Any] = {"op": "exec", "command": command, "run": run}
        if arm == "host":
            request["where"] = "host"
        else:
            request["arm"] = arm
        if window is not None:
            request["window"] = window
        client.send(id=i, **request)
        sent.append(i)
        kinds[i] = kind
    results = {i: client.wait(i, timeout=120)["result"] for i in sent}
    failed = {i: r for i, r in results.items() if r["outcome"] == "exceptional"}
    assert not failed, json.dumps(failed, indent=1)[:3000]
    by_arm: dict[str, int] = {}
    for i, r in results.items():
        by_arm[r["arm"]] = by_arm.get(r["arm"], 0) + 1
        if bwrap_raced(r):
            by_arm["bwrap mount race"] = by_arm.get("bwrap mount race", 0) + 1
            kinds[i] = "raced"
        elif kinds[i] == "quick":
            assert r["outcome"] == "settled" and r["stdout"] == f"{i}\n", json.dumps(r)
        else:
            assert r["outcome"] == "backgrounded", (i, r)

    runs = client.ask(f"procs-{first}", op="processes")["runs"]
    for report in runs.values():
        for pid in report["pids"]:
            with contextlib.suppress(psutil.NoSuchProcess):
                seen.append(psutil.Process(pid))
        if delegated:
            assert report["share"]["kind"] == "cpu_and_memory"
    for i in (i for i in results if kinds[i] == "halt"):
        halted = client.ask(f"halt-{i}", op="halt", handle=results[i]["handle"])
        assert halted["ok"] and halted["result"]["killed"], halted
    released = client.ask(f"release-{first}", op="release", run="doomed")["results"]
    assert len(released) == sum(1 for k in kinds.values() if k == "release")
    waiting = {results[i]["handle"] for i in results if kinds[i] == "harvest"}
    deadline = time.monotonic() + 60
    n = 0
    while waiting:
        assert time.monotonic() < deadline, f"never harvested: {waiting}"
        n += 1
        for got in client.ask(f"harvest-{first}-{n}", op="harvest")["results"]:
            assert got["stdout"].startswith("late-"), got
            waiting.discard(got["handle"])
        time.sleep(0.05)
    # Runs keep their cgroup until released; no process of theirs is left.
    runs = client.ask(f"empty-{first}", op="processes")["runs"]
    assert all(report["pids"] == [] for report in runs.values()), runs
    return by_arm, n


def split(open_fds: dict[str, str]) -> tuple[int, int]:
    """(sockets, everything else): the docker SDK keeps a bounded pool of sockets open."""
    sockets = sum(1 for what in open_fds.values() if what.startswith("socket:"))
    return sockets, len(open_fds) - sockets


def test_two_hundred_commands_leave_nothing_behind(load: tuple[list[str], Path]) -> None:
    arms, tmp = load
    scratch = tmp / "scratch"
    delegated = delegation().shares is PlatformShares.CPU_AND_MEMORY
    argv = [
        sys.executable,
        "-c",
        "from sprawl_orch.cli import main; main()",
        "serve",
        "-C",
        str(tmp / "tree"),
        "--config",
        str(tmp / "sprawl.toml"),
        "--workers",
        str(PARALLEL),
    ]
    if delegated:
        argv += ["--shares", "cpu_and_memory", "--run-memory-bytes", str(256 * MIB)]
    before = {
        "sprawl containers (all sessions)": docker_sprawl_containers()
        if "container" in arms
        else 0,
        "scratch copies": len(list(scratch.iterdir())),
        "cgroup dirs (all sessions)": cgroup_dirs(),
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp
    )
    client = Client(proc)
    server = psutil.Process(proc.pid)
    seen: list[psutil.Process] = []
    # The same round twice; between the two quiescent points nothing may accumulate.
    by_arm, harvests = one_round(client, arms, 0, N // 2, delegated, seen)
    first_fds = fds(proc.pid)
    more, harvests2 = one_round(client, arms, N // 2, N - N // 2, delegated, seen)
    second_fds = fds(proc.pid)
    for arm, count in more.items():
        by_arm[arm] = by_arm.get(arm, 0) + count
    print("\ncommands by arm:", by_arm)

    sandboxed = [a for a in arms if a != "host"]
    for k, arm in enumerate(sandboxed):  # still running when stdin closes
        left = client.ask(
            f"left-{k}", op="exec", command=["sleep", "64"], window=0.05, run="left", arm=arm
        )
        assert left["result"]["outcome"] == "backgrounded", left
    session = left["result"]["handle"].rsplit("-", 1)[0]
    seen += server.children(recursive=True)
    during = {
        "sprawl containers (this session)": docker_sprawl_containers(f"sprawl.session={session}")
        if "container" in arms
        else 0,
        "scratch copies": len(list(scratch.iterdir())),
        "processes (server's descendants)": len(alive(seen)),
        "cgroup dirs (this session)": cgroup_dirs(session),
    }
    if "container" in arms:
        assert during["sprawl containers (this session)"] == 1
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(60) == 0
    elapsed = time.monotonic() - started
    after = {
        "sprawl containers (all sessions)": docker_sprawl_containers()
        if "container" in arms
        else 0,
        "sprawl containers (this session)": docker_sprawl_containers(f"sprawl.session={session}")
        if "container" in arms
        else 0,
        "scratch copies": len(list(scratch.iterdir())),
        "processes (server's descendants)": len(alive(seen)),
        "cgroup dirs (all sessions)": cgroup_dirs(),
        "cgroup dirs (this session)": cgroup_dirs(session),
    }
    print(
        f"{N} commands + {harvests + harvests2} harvest requests in {elapsed:.1f} s, "
        f"arms {arms}, per-run cgroups {'on' if delegated else 'off'}"
    )
    print("before:", before)
    print(f"while serving ({len(sandboxed)} commands left running):", during)
    print("after EOF:", after)
    (sock1, other1), (sock2, other2) = split(first_fds), split(second_fds)
    print(
        f"server fds (sockets + other) with the backlog empty: after {N // 2} commands "
        f"{sock1} + {other1}, after {N} commands {sock2} + {other2}"
    )
    if delegated:
        assert during["cgroup dirs (this session)"] > 0
    assert during["processes (server's descendants)"] > 0
    assert after["sprawl containers (this session)"] == 0
    assert after["scratch copies"] == before["scratch copies"] == 0
    assert after["processes (server's descendants)"] == 0, alive(seen)
    assert after["cgroup dirs (this session)"] == 0
    grown = {fd: what for fd, what in second_fds.items() if first_fds.get(fd) != what}
    assert other2 <= other1, grown
    # Sockets are the container arm's docker SDK connections, pooled per client
    # (orchestrator/engines/docker.py). The pool grows to the peak concurrency seen (8
    # execs, each holding a wait and an attach connection, over 2 clients), never with the
    # count of commands: before pooling it leaked ~3.6 per container command (~180 here).
    bound = 2 * (8 + 1) + 2
    assert sock2 <= bound, f"sockets grew {sock1} -> {sock2}; concurrency bounds them at {bound}"
