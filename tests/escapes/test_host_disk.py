"""Escape class **host disk** (issue 30 break 4, issue 27 items 1-2): what a command prints
or changes must not fill the host's disk, nor take another working directory's kept work.

Every probe is judged from the host, by what is on disk in the state directory afterwards:

- `stdout-flood`: with the default bounds, 40 MiB on stdout holds at most
  `output_keep_bytes` (16 MiB) of the host's disk while it runs (outputs/, sampled) and
  leaves at most that in kept-output/, and the result names the cut. Before: all 40 MiB
  were written and stayed (3 GiB with `head -c 3221225472`), pruned never.
- `kept-output-budget`: four 3 MiB floods with a 1 MiB cap and a 2.5 MiB budget: kept-output/
  never holds more than the budget, the oldest is dropped first and the result that drops
  it names it.
- `sparse-change-eviction`: working directory A keeps a 1 MiB change; B, on the same state
  directory, makes a sparse file that fits the changes budget only if A's is dropped. A's
  must still be there (it is another agent's unapplied work); B's result says its own
  changes were not kept. Before: A's was dropped.
- `killed-cli-outputs`: a `sprawl-orch exec` SIGKILLed while its command prints leaves
  `outputs/<session>/`; the next call of the state directory removes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.changes.store import load
from sprawl_orch.config import parse_config
from sprawl_orch.runs.output_keep import KEEP_BYTES
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.runner import config_data, landlock_data
from tests.integration.conftest import missing

MIB = 1024 * 1024
# The filesystem may allocate a few blocks past a file's size (seen: 4 KiB on docker's).
SLACK = 64 * 1024
ROWS = ("copied_tree", "linux_namespaces", "landlock", "docker", "podman")


def data_for(row: str, tmp: Path, request: pytest.FixtureRequest, **state: int) -> dict[str, Any]:
    scratch, st = tmp / "scratch", tmp / "state"
    scratch.mkdir(exist_ok=True)
    if row in ("docker", "podman"):
        image = str(request.getfixturevalue(f"{row}_image"))
        data = config_data("container", scratch, st, (row, image))
    elif row == "linux_namespaces":
        if not Path("/usr/bin/bwrap").exists():
            missing("bwrap is not installed (apt-get install bubblewrap)")
        data = config_data("native", scratch, st)
    elif row == "landlock":
        data = landlock_data(scratch, st)
    else:
        data = config_data("copied_tree", scratch, st)
    data["state"].update(state)
    return data


def tree(tmp: Path, name: str = "tree") -> Path:
    path = tmp / name
    path.mkdir()
    (path / "a.txt").write_text("a\n")
    return path


def disk_of(path: Path) -> int:
    """Bytes the host's disk holds under `path` (allocated blocks, as df sees them)."""
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except OSError:
                continue
    return total


@pytest.mark.parametrize("row", ROWS)
def test_stdout_flood_is_cut_and_named(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = data_for(row, tmp_path, request)
    # While it runs, the host's disk under outputs/ is sampled from here: a cut made only
    # after the command would have had all 40 MiB on the disk first.
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], disk_of(tmp_path / "state" / "outputs"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with ExecTool(parse_config(data), tree(tmp_path)) as tool:
            result = tool.exec(["head", "-c", str(40 * MIB), "/dev/zero"], timeout=300)
    finally:
        done.set()
        sampler.join()
    assert result.outcome == "settled", (result.code, result.detail)
    kept = disk_of(tmp_path / "state" / "kept-output")
    print(
        f"{row}: 40 MiB on stdout: at most {peak[0]} bytes under outputs/ while it ran, {kept} kept"
    )
    assert peak[0] <= KEEP_BYTES + SLACK, f"{peak[0]} bytes on the host's disk while it ran"
    assert kept <= KEEP_BYTES + SLACK, f"40 MiB of stdout left {kept} bytes on the host's disk"
    assert result.kept_output is not None, "the result does not name the cut"
    assert result.kept_output["stdout"] == {"bytes": 40 * MIB, "kept_bytes": KEEP_BYTES}
    assert f"the first {KEEP_BYTES} bytes are kept in" in result.stdout


@pytest.mark.parametrize("row", ROWS)
def test_kept_output_stays_within_its_budget(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    budget = 5 * MIB // 2
    data = data_for(row, tmp_path, request, output_keep_bytes=MIB, output_budget_bytes=budget)
    root = tmp_path / "state" / "kept-output"
    handles: list[str] = []
    evicted: list[list[str]] = []
    with ExecTool(parse_config(data), tree(tmp_path)) as tool:
        for _ in range(4):
            result = tool.exec(["sh", "-c", f"head -c {3 * MIB} /dev/zero"], timeout=300)
            assert result.outcome == "settled" and result.kept_output, (result.code, result.detail)
            assert result.stdout_full is not None
            handles.append(Path(result.stdout_full).parent.name)
            evicted.append(list(result.kept_output["evicted"]))
            held = disk_of(root)
            assert held <= budget + SLACK, (
                f"kept-output/ holds {held} bytes past its budget of {budget}"
            )
    print(f"{row}: kept {handles}, evicted per command {evicted}")
    # 1 MiB each: two fit, the third drops the first, the fourth the second
    assert evicted == [[], [], [handles[0]], [handles[1]]], evicted
    assert not (root / handles[0]).exists() and (root / f"{handles[0]}.gone").exists()


@pytest.mark.parametrize("row", ROWS)
def test_a_command_never_drops_another_directorys_changes(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = data_for(row, tmp_path, request, changes_budget_bytes=4 * MIB)
    config = parse_config(data)
    with ExecTool(config, tree(tmp_path, "a")) as tool_a:
        a = tool_a.exec(["sh", "-c", f"head -c {MIB} /dev/urandom > work.bin"], timeout=300)
    assert a.outcome == "settled" and a.changes and a.changes.kept, (a.code, a.detail, a.changes)
    with ExecTool(config, tree(tmp_path, "b")) as tool_b:
        b = tool_b.exec(
            ["sh", "-c", "dd if=/dev/zero of=sparse.bin bs=1024 count=0 seek=3500 2>/dev/null"],
            timeout=300,
        )
    assert b.outcome == "settled" and b.changes is not None, (b.code, b.detail)
    # Judged on disk: A's kept changes and their new bytes are still there to apply.
    kept_a = load(tmp_path / "state", a.changes.handle)
    blob = kept_a.blob("work.bin")
    assert blob is not None and blob.stat().st_size == MIB, "A's unapplied change was dropped"
    print(f"{row}: B's changes: kept={b.changes.kept} note={b.changes.note}")
    assert not b.changes.kept and "other working directories" in (b.changes.note or "")
    assert not b.changes.dropped


@pytest.mark.parametrize("row", ["copied_tree", "landlock", "docker"])
def test_a_killed_cli_leaves_no_output_directory(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = data_for(row, tmp_path, request)
    work = tree(tmp_path)
    config_file = tmp_path / "sprawl.toml"
    config_file.write_text(_toml(data))
    outputs = tmp_path / "state" / "outputs"
    cli = subprocess.Popen(
        [
            *(sys.executable, "-c", "from sprawl_orch.cli import main; main()", "exec"),
            *("--config", str(config_file), "-C", str(work), "--json", "--"),
            *("sh", "-c", "head -c 5000000 /dev/zero; sleep 60"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            f.name == "stdout" and f.stat().st_size >= 5000000 for f in outputs.rglob("stdout")
        ):
            assert cli.poll() is None, "the CLI ended before it was killed"
            time.sleep(0.05)
        left = [p.name for p in outputs.iterdir()] if outputs.exists() else []
        assert left, "the command never wrote its output: the kill proves nothing"
    finally:
        cli.send_signal(signal.SIGKILL)
        cli.wait()
    with ExecTool(parse_config(data), work) as tool:
        after = tool.exec(["true"], timeout=300)
        assert after.outcome == "settled", (after.code, after.detail)
        still = [p.name for p in outputs.iterdir() if p.name in left]
    print(f"{row}: the killed CLI left {left}; after the next call: {still}")
    assert not still, f"outputs/{still} of a killed CLI outlived the next call"


def _toml(data: dict[str, Any]) -> str:
    """The few shapes config_data makes (tables of str/int, one nested level of tables)."""

    def value(v: Any) -> str:
        return str(v) if isinstance(v, int) else f'"{v}"'

    lines: list[str] = []

    def table(name: str, body: dict[str, Any]) -> None:
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {value(v)}" for k, v in body.items() if not isinstance(v, dict))
        for k, v in body.items():
            if isinstance(v, dict):
                table(f"{name}.{k}", v)

    for name, body in data.items():
        table(name, body)
    return "\n".join(lines) + "\n"
