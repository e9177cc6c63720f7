"""Warm containers kept by the exec server across one-shot CLI calls (issue 26, docs/warm.md),
on real docker and podman, by the real `sprawl-orch` program:

- a second call in the same working directory and config enters the same container
  (`reused`), another directory or config gets another, concurrent calls never share;
- a client SIGKILLed mid-command leaves no process of its command and no container (the
  server drops what the call held; the guardian removes it), and the next call works;
- a server SIGKILLed, or `sprawl-orch server stop`, leaves no kept container.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.conftest import holding as _holding
from tests.unit.test_exec_spare import _spares

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))
# not the last command: busybox sh would exec it, and its line (the token) would be gone
HOLD = "echo started; sleep 300; echo never"
WAIT = 90.0  # seconds: the guardian removes asynchronously, on a loaded 2-core machine


class Place:
    def __init__(self, root: Path, engine: str, image: str) -> None:
        self.root, self.engine, self.image = root, engine, image
        runtime = root / "run"
        runtime.mkdir(mode=0o700)
        self.env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SPRAWL_EXEC_SERVER_IDLE": "60"}
        self.made: set[str] = set()

    def tree(self, name: str) -> Path:
        tree = self.root / name
        tree.mkdir(exist_ok=True)
        (tree / "a.txt").write_text("a\n")
        return tree

    def config(self, name: str, pids: int = 256) -> Path:
        path = self.root / f"{name}.toml"
        path.write_text(
            f'[sandbox]\narm = "container"\nscratch_dir = "{self.root}"\n'
            f'[sandbox.container]\nengine = "{self.engine}"\nwarm = true\npids = {pids}\n'
            f'images = {{ {self.engine} = "{self.image}" }}\n'
            f'[state]\ndir = "{self.root / "state"}"\n'
        )
        return path

    def argv(self, tree: Path, config: Path, *command: str, as_json: bool = True) -> list[str]:
        """With --json the command's output is in the result; without, live on stdout."""
        said = ["--json"] if as_json else []
        return [PROGRAM, "exec", *said, "-C", str(tree), "--config", str(config), "--", *command]

    def call(self, tree: Path, config: Path, *command: str) -> dict[str, object]:
        done = subprocess.run(
            self.argv(tree, config, *command),
            env=self.env,
            capture_output=True,
            timeout=240,
            check=False,
        )
        said = json.loads(done.stdout) if done.stdout else {}
        assert done.returncode == 0, (said.get("error"), done.stderr[-3000:])
        assert b"exec server is not used" not in done.stderr
        record = said["container"]
        assert isinstance(record, dict) and record["warm"] is True, record
        self.made.add(str(record["id"]))
        return record

    def exists(self, container: str) -> bool:
        done = subprocess.run(
            [self.engine, "inspect", "--format", "{{.Id}}", container],
            capture_output=True,
            timeout=60,
            check=False,
        )
        return done.returncode == 0

    def wait_gone(self, containers: set[str]) -> None:
        deadline = time.monotonic() + WAIT
        while left := [c for c in containers if self.exists(c)]:
            assert time.monotonic() < deadline, f"still there after {WAIT:g} s: {left}"
            time.sleep(0.5)

    def server_pid(self) -> int:
        locks = list((self.root / "run" / "sprawl-orch").glob("exec-*.sock.lock"))
        assert len(locks) == 1, locks
        return int(locks[0].read_text().strip())

    def stop(self) -> None:
        subprocess.run(
            [PROGRAM, "server", "stop"], env=self.env, capture_output=True, timeout=60, check=False
        )


@pytest.fixture
def place(tmp_path: Path, engine_image: tuple[str, str]) -> Iterator[Place]:
    engine, image = engine_image
    made = Place(tmp_path, engine, image)
    try:
        yield made
    finally:
        made.stop()
        made.wait_gone(made.made)


def test_a_second_call_reuses_the_container_and_another_place_gets_another(place: Place) -> None:
    tree, config = place.tree("t"), place.config("c")
    first = place.call(tree, config, "sh", "-c", "echo x > /tmp/left")
    second = place.call(tree, config, "sh", "-c", "test ! -e /tmp/left")
    assert (first["reused"], second["reused"]) == (False, True)
    assert second["id"] == first["id"]
    other_tree = place.call(place.tree("u"), config, "true")
    other_config = place.call(tree, place.config("d", pids=128), "true")
    ids = {first["id"], other_tree["id"], other_config["id"]}
    assert len(ids) == 3, ids


def _in_container(pid: int, container: str) -> bool:
    """The process runs in that container (its cgroup path names the container's id)."""
    try:
        return container in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:  # gone since listed
        return False


def test_concurrent_calls_never_share(place: Place) -> None:
    tree, config = place.tree("t"), place.config("c")
    kept = str(place.call(tree, config, "true")["id"])
    token = f"warm-served-{secrets.token_hex(6)}"
    busy = subprocess.Popen(
        place.argv(tree, config, "sh", "-c", HOLD, token, as_json=False),
        env=place.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert busy.stdout is not None
        assert busy.stdout.readline() == b"started\n"
        # the busy call took the kept container ...
        assert any(_in_container(pid, kept) for pid in _holding(token)), _holding(token)
        meanwhile = place.call(tree, config, "true")
    finally:
        os.kill(busy.pid, signal.SIGKILL)  # its container is dropped (the test above)
        busy.wait(timeout=60)
    # ... so a call meanwhile got another one
    assert meanwhile["id"] != kept and meanwhile["reused"] is False


def test_a_killed_client_leaves_no_process_nor_container_and_the_next_call_works(
    place: Place,
) -> None:
    """The call runs in the server's spare (cli/exec_spare.py), forked before it came with
    its copies of the kept containers' owners closed, and handed them with the caller: the
    container it takes is owned through what was handed, so the kill still removes it."""
    tree, config = place.tree("t"), place.config("c")
    kept = place.call(tree, config, "true")
    server = place.server_pid()
    spares = _spares(server)
    assert len(spares) == 1, spares
    token = f"warm-served-{secrets.token_hex(6)}"
    client = subprocess.Popen(
        place.argv(tree, config, "sh", "-c", HOLD, token, as_json=False),
        env=place.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert client.stdout is not None
    assert client.stdout.readline() == b"started\n"
    assert any(_in_container(pid, str(kept["id"])) for pid in _holding(token)), "in the kept one"
    calls = [
        p.pid
        for p in psutil.Process(server).children()
        if p.status() != "zombie" and p.name() != "cat"  # the witness: exec_place.start_witness
    ]
    assert calls == spares, "the call was not the spare"
    os.kill(client.pid, signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + WAIT
    while _holding(token):
        assert time.monotonic() < deadline, _holding(token)
        time.sleep(0.2)
    place.wait_gone({str(kept["id"])})
    after = place.call(tree, config, "true")
    assert after["id"] != kept["id"] and after["reused"] is False


def test_a_killed_server_leaves_no_container(place: Place) -> None:
    tree, config = place.tree("t"), place.config("c")
    kept = place.call(tree, config, "true")
    assert place.exists(str(kept["id"]))
    os.kill(place.server_pid(), signal.SIGKILL)
    place.wait_gone({str(kept["id"])})


def test_server_stop_removes_the_kept_containers(place: Place) -> None:
    config = place.config("c")
    kept = {str(place.call(place.tree(n), config, "true")["id"]) for n in ("t", "u")}
    assert len(kept) == 2 and all(place.exists(c) for c in kept)
    place.stop()
    place.wait_gone(kept)
