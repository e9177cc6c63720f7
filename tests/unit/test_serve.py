"""The serve protocol in-process: parsing, every operation, out-of-order answers, closing."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

from sprawl_orch.runs.backlog import Backlog
from sprawl_orch.runs.cgroups import delegation
from sprawl_orch.runs.shares import Shares
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.serve.server import Server
from sprawl_orch.serve.wire import ErrorResponse, ExecRequest, parse, schema
from tests.unit.conftest import make_config


def test_bad_lines_become_bad_request_responses() -> None:
    for line, rid, subject in [
        ("not json", None, "request"),
        ("[1, 2]", None, "request"),
        ('{"id": 7}', 7, "request"),  # no op
        ('{"id": "a", "op": "launch"}', "a", "request"),
        ('{"id": 3, "op": "halt"}', 3, "halt.handle"),
        ('{"id": 4, "op": "exec", "command": ["true"], "window": -1}', 4, "exec.window"),
        ('{"id": 5, "op": "exec", "command": ["true"], "colour": "red"}', 5, "exec.colour"),
        ('{"id": true, "op": "harvest"}', None, "harvest.id.str"),
    ]:
        got = parse(line)
        assert isinstance(got, ErrorResponse), line
        assert got.id == rid and not got.ok
        assert got.error.code == "E_BAD_REQUEST"
        assert got.error.subject == subject, (line, got.error)
        assert got.error.detail and "--schema" in got.error.recovery


def test_requests_parse() -> None:
    got = parse('{"id": "x", "op": "exec", "command": "ls | wc", "shell": true, "run": "r"}')
    assert isinstance(got, ExecRequest)
    assert got.command == "ls | wc" and got.shell and got.run == "r" and got.where == "sandbox"


def test_schema_names_every_operation() -> None:
    text = json.dumps(schema())
    for op in ("exec", "harvest", "halt", "release", "processes", "doctor"):
        assert f'"{op}"' in text
    # The refusal's code is an enum of every ErrorCode: a client can switch on it.
    assert "E_BAD_REQUEST" in text and "E_TOOL_UNAVAILABLE" in text
    assert set(schema()) == {"request", "response"}


class Lines:
    """stdin for the server: lines fed from the test, EOF when closed."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._closed = False

    def send(self, **request: Any) -> None:
        with self._cond:
            self._lines.append(json.dumps(request))
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def __iter__(self) -> Any:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._lines or self._closed)
                if not self._lines:
                    return
                line = self._lines.pop(0)
            yield line


class Out(io.StringIO):
    def responses(self) -> dict[Any, dict[str, Any]]:
        return {r["id"]: r for r in map(json.loads, self.getvalue().splitlines())}

    def wait_for(self, rid: Any, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while rid not in self.responses():
            assert time.monotonic() < deadline, f"no response {rid}"
            time.sleep(0.01)
        return self.responses()[rid]


def start(
    tmp_path: Path, tree: Path, offerings: Offerings, backlog: Backlog | None = None
) -> tuple[Server, Lines, Out, threading.Thread]:
    config = make_config(tmp_path, arm="copied_tree")
    out = Out()
    server = Server(config, tree, out, offerings=offerings, backlog=backlog)
    lines = Lines()
    # daemon: a test that fails before it closes `lines` left this thread waiting for ever,
    # and pytest's exit joined it -- the clean-clone CI hung after its summary line
    thread = threading.Thread(target=server.serve, args=(lines,), daemon=True)
    thread.start()
    return server, lines, out, thread


def test_every_operation_and_out_of_order_answers(
    tmp_path: Path, tree: Path, scratch: Path, offerings: Offerings
) -> None:
    _server, lines, out, thread = start(tmp_path, tree, offerings)
    # "slow" ends only once the test has seen "fast" answered (a fixed `sleep 0.8` lost that
    # race when a loaded machine took longer than that to copy the tree for "fast").
    go = tmp_path / "go"
    lines.send(
        id="slow",
        op="exec",
        window=30,
        command=["sh", "-c", f"until [ -e '{go}' ]; do sleep 0.02; done; echo slow"],
    )
    lines.send(id="fast", op="exec", command="echo fast", shell=True)
    fast = out.wait_for("fast")
    assert "slow" not in out.responses()  # answered out of order
    assert fast["ok"] and fast["result"]["stdout"] == "fast\n"
    go.touch()
    assert out.wait_for("slow")["result"]["stdout"] == "slow\n"

    lines.send(id=1, op="exec", command=["sh", "-c", "sleep 0.4; echo bg"], window=0.05, run="r")
    bg = out.wait_for(1)["result"]
    assert bg["outcome"] == "backgrounded"
    lines.send(id=2, op="exec", command=["sleep", "381"], window=0.05, run="r")
    doomed = out.wait_for(2)["result"]["handle"]
    lines.send(id=3, op="exec", command=["sleep", "382"], window=0.05, run="gone")
    out.wait_for(3)
    lines.send(id=4, op="processes")
    runs = out.wait_for(4)["runs"]
    assert set(runs) == {"r", "gone"} and runs["r"]["affinity"] == "os"
    lines.send(id=5, op="halt", handle=doomed)
    assert out.wait_for(5)["result"]["killed"]
    lines.send(id=6, op="release", run="gone")
    released = out.wait_for(6)["results"]
    assert len(released) == 1 and released[0]["killed"]
    # Harvest until the background command has ended (it sleeps 0.4 s; under load, longer).
    harvested: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while not harvested:
        assert time.monotonic() < deadline, "the background command never came back"
        rid = f"harvest-{time.monotonic_ns()}"
        lines.send(id=rid, op="harvest")
        harvested = out.wait_for(rid)["results"]
        time.sleep(0.05)
    assert [h["stdout"] for h in harvested] == ["bg\n"]
    lines.send(id=8, op="halt", handle=doomed)
    assert out.wait_for(8)["error"]["code"] == "E_UNKNOWN_HANDLE"
    lines.send(id=9, op="exec", command=["true"], where="host", run="h")
    assert out.wait_for(9)["result"]["arm"] == "host"
    lines.send(id=10, op="doctor")
    doctor = out.wait_for(10, timeout=60)
    assert doctor["ok"] and doctor["report"]["cgroup"]["detail"]

    lines.send(id="last", op="exec", command=["sleep", "383"], window=0.05)
    out.wait_for("last")
    lines.close()
    thread.join(30)
    assert not thread.is_alive()
    assert list(scratch.iterdir()) == []  # every copy deleted on EOF


def test_eof_kills_a_command_still_in_its_window(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    server, lines, out, thread = start(tmp_path, tree, offerings)
    lines.send(id=1, op="exec", command=["sleep", "391"], window=300)
    deadline = time.monotonic() + 10
    while not server.backlog.processes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    lines.close()
    thread.join(30)
    answer = out.responses()[1]["result"]
    assert answer["killed"] and answer["outcome"] == "settled"
    assert server.backlog.processes() == {}


def test_ceiling_unapplied_through_serve(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    backlog = Backlog("s", Shares.cpu_and_memory(2**20), found=delegation(tmp_path / "none"))
    _server, lines, out, thread = start(tmp_path, tree, offerings, backlog)
    lines.send(id=1, op="exec", command=["true"])
    result = out.wait_for(1)["result"]
    assert result["memory_ceiling"]["state"] == "unapplied"
    assert result["memory_ceiling"]["why"] == "not_delegated"
    lines.close()
    thread.join(30)


def test_cli_prints_the_schema_and_checks_its_options() -> None:
    from click.testing import CliRunner

    from sprawl_orch.cli import main

    printed = CliRunner().invoke(main, ["serve", "--schema"])
    assert printed.exit_code == 0
    assert json.loads(printed.output) == json.loads(json.dumps(schema()))
    wrong = CliRunner().invoke(main, ["serve", "--shares", "cpu_and_memory"])
    assert wrong.exit_code == 2 and "--run-memory-bytes" in wrong.output


def test_subprocess_without_delegation_reports_unapplied(tmp_path: Path, tree: Path) -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    config = tmp_path / "sprawl.toml"
    config.write_text(
        f'[sandbox]\narm = "copied_tree"\nscratch_dir = "{tmp_path}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from sprawl_orch.cli import main; main()",
            "serve",
            "-C",
            str(tree),
            "--config",
            str(config),
            "--shares",
            "cpu_and_memory",
            "--run-memory-bytes",
            str(2**20),
            "--cgroup-root",
            str(tmp_path / "no-cgroupfs"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write('{"id": 1, "op": "exec", "command": ["true"]}\n')
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    proc.stdin.close()
    assert proc.wait(30) == 0
    assert answer["result"]["exit_code"] == 0
    assert answer["result"]["memory_ceiling"]["why"] == "not_delegated"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("sprawl-")] == []
