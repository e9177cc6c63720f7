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

from orchestrator.cgroups import PlatformShares, delegation
from tests.integration.conftest import busybox_image, engine_problem, in_ci, remove_image

REPO = Path(__file__).resolve().parents[2]
N = 200
PARALLEL = 8
MIB = 2**20


def arms_here() -> tuple[list[str], str | None]:
    arms = ["copied_tree", "host"]
    if importlib.util.find_spec("native_fallbacks.bwrap") is not None and shutil.which("bwrap"):
        from native_fallbacks.bwrap import user_namespace_works

        if user_namespace_works(shutil.which("bwrap") or "bwrap")[0]:
            arms.append("native")
    image = None
    if importlib.util.find_spec("orchestrator.container.arm") is not None:
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
    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"],
                          capture_output=True, text=True, check=False)
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


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


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
        "[sandbox]", 'arm = "copied_tree"', f'scratch_dir = "{tmp_path / "scratch"}"',
        "window_seconds = 30", "[state]", f'dir = "{tmp_path / "state"}"',
    ]
    if image:
        lines += ["[sandbox.container]", 'engine = "docker"', "[sandbox.container.images]",
                  f'docker = "{image}"']
    config.write_text("\n".join(lines) + "\n")
    (tmp_path / "scratch").mkdir()
    try:
        yield arms, tmp_path
    finally:
        if image:
            remove_image("docker", image)


def test_two_hundred_commands_leave_nothing_behind(load: tuple[list[str], Path]) -> None:
    arms, tmp = load
    scratch = tmp / "scratch"
    delegated = delegation().shares is PlatformShares.CPU_AND_MEMORY
    argv = [sys.executable, "-c", "from orchestrator.cli import main; main()", "serve",
            "-C", str(tmp / "tree"), "--config", str(tmp / "sprawl.toml"),
            "--workers", str(PARALLEL)]
    if delegated:
        argv += ["--shares", "cpu_and_memory", "--run-memory-bytes", str(256 * MIB)]
    before = {
        "sprawl containers (all sessions)": docker_sprawl_containers() if "container" in arms
        else 0,
        "scratch copies": len(list(scratch.iterdir())),
        "cgroup dirs (all sessions)": cgroup_dirs(),
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=tmp)
    client = Client(proc)
    server = psutil.Process(proc.pid)
    seen: list[psutil.Process] = []
    sent: list[Any] = []
    kinds: dict[int, str] = {}
    warm_fds = 0
    for i in range(N):
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
        if i == 4 * len(arms) * 2:
            for rid in sent:
                client.wait(rid)
            warm_fds = fds(proc.pid)
    results = {i: client.wait(i, timeout=120)["result"] for i in range(N)}
    session = next(r["handle"] for r in results.values() if r["handle"]).rsplit("-", 1)[0]
    failed = {i: r for i, r in results.items() if r["outcome"] == "exceptional"}
    assert not failed, json.dumps(failed, indent=1)[:3000]
    by_arm: dict[str, int] = {}
    for r in results.values():
        by_arm[r["arm"]] = by_arm.get(r["arm"], 0) + 1
    print("\ncommands by arm:", by_arm)
    for i, r in results.items():
        if kinds[i] == "quick":
            assert r["outcome"] == "settled" and r["stdout"] == f"{i}\n", (i, r)
        else:
            assert r["outcome"] == "backgrounded", (i, r)

    runs = client.ask("procs", op="processes")["runs"]
    for report in runs.values():
        for pid in report["pids"]:
            with contextlib.suppress(psutil.NoSuchProcess):
                seen.append(psutil.Process(pid))
        if delegated:
            assert report["share"]["kind"] == "cpu_and_memory"
    for i in (i for i in results if kinds[i] == "halt"):
        halted = client.ask(f"halt-{i}", op="halt", handle=results[i]["handle"])
        assert halted["ok"] and halted["result"]["killed"], halted
    released = client.ask("release", op="release", run="doomed")["results"]
    assert len(released) == sum(1 for k in kinds.values() if k == "release")
    waiting = {results[i]["handle"] for i in results if kinds[i] == "harvest"}
    deadline = time.monotonic() + 60
    n = 0
    while waiting:
        assert time.monotonic() < deadline, f"never harvested: {waiting}"
        n += 1
        for got in client.ask(f"harvest-{n}", op="harvest")["results"]:
            assert got["stdout"].startswith("late-"), got
            waiting.discard(got["handle"])
        time.sleep(0.05)
    settled_fds = fds(proc.pid)

    sandboxed = [a for a in arms if a != "host"]
    for k, arm in enumerate(sandboxed):  # still running when stdin closes
        left = client.ask(f"left-{k}", op="exec", command=["sleep", "64"], window=0.05,
                          run="left", arm=arm)
        assert left["result"]["outcome"] == "backgrounded", left
    seen += server.children(recursive=True)
    during = {
        "sprawl containers (this session)": docker_sprawl_containers(f"sprawl.session={session}")
        if "container" in arms else 0,
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
        "sprawl containers (all sessions)": docker_sprawl_containers() if "container" in arms
        else 0,
        "sprawl containers (this session)": docker_sprawl_containers(f"sprawl.session={session}")
        if "container" in arms else 0,
        "scratch copies": len(list(scratch.iterdir())),
        "processes (server's descendants)": len(alive(seen)),
        "cgroup dirs (all sessions)": cgroup_dirs(),
        "cgroup dirs (this session)": cgroup_dirs(session),
    }
    print(f"{N} commands + {n} harvest requests in {elapsed:.1f} s, arms {arms}, "
          f"per-run cgroups {'on' if delegated else 'off'}")
    print("before:", before)
    print(f"while serving ({len(sandboxed)} commands left running):", during)
    print("after EOF:", after)
    print(f"server fds: {warm_fds} after warm-up, {settled_fds} after {N} commands")
    if delegated:
        assert during["cgroup dirs (this session)"] > 0
    assert during["processes (server's descendants)"] > 0
    assert after["sprawl containers (this session)"] == 0
    assert after["scratch copies"] == before["scratch copies"] == 0
    assert after["processes (server's descendants)"] == 0, alive(seen)
    assert after["cgroup dirs (this session)"] == 0
    assert settled_fds <= warm_fds + 2, (warm_fds, settled_fds)
