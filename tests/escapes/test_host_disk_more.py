"""Escape class **host disk**, what the engines keep (issue 30 break 4, attacked again):
output_pipe.py bounds what *this process* writes of a command's streams, but a container's
stdout is also what the engine's own log driver stores: docker's default `json-file`
(`<docker root>/containers/<id>/<id>-json.log`) and podman's default `k8s-file`
(`<graph root>/overlay-containers/<id>/userdata/ctr.log`) write every byte the container
prints, for as long as the container exists, on the host's disk, outside the state directory.

Judged from the host: while a fresh container prints 40 MiB, every engine log file that names
the round's token (printed first, on stderr) is sampled, and its largest size must stay under
`output_keep_bytes`. Before the fix (no `--log-driver`): docker's json-file held 40 MiB of
`a` as ~60 MiB of JSON and podman's ctr.log ~43 MiB, each until the container was removed.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.runs.output_keep import KEEP_BYTES
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.test_host_disk import MIB, SLACK, data_for, disk_of, tree


def log_files(engine: str) -> list[Path]:
    """Every container log file the engine keeps (the engine's own record of its root)."""
    if engine == "docker":
        root = subprocess.run(
            ["docker", "info", "--format", "{{.DockerRootDir}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return list(Path(root, "containers").glob("*/*-json.log"))
    root = subprocess.run(
        ["podman", "info", "--format", "{{.Store.GraphRoot}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return list(Path(root, "overlay-containers").glob("*/userdata/ctr.log"))


def naming(path: Path, token: str) -> bool:
    try:
        with path.open("rb") as f:
            return token.encode() in f.read(4096)
    except OSError:
        return False


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_the_engines_log_never_holds_the_flood(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = data_for(engine, tmp_path, request)
    token = f"flood-{secrets.token_hex(6)}"
    roots = log_files(engine)  # resolves the engine's root before the run
    assert roots is not None
    peak, seen = [0], [False]
    done = threading.Event()

    def sample() -> None:
        mine: list[Path] = []
        while not done.wait(0.02):
            if not mine:
                mine = [p for p in log_files(engine) if naming(p, token)]
            for path in mine:
                seen[0] = True
                try:
                    peak[0] = max(peak[0], path.stat().st_blocks * 512)
                except OSError:
                    continue

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # the token first (on stderr), then 40 MiB of `a` on stdout, slowly enough to be sampled
    line = f"echo {token} >&2; sleep 1; head -c {40 * MIB} /dev/zero | tr '\\0' a; sleep 1"
    try:
        with ExecTool(parse_config(data), tree(tmp_path)) as tool:
            result = tool.exec(["sh", "-c", line], timeout=300)
    finally:
        done.set()
        sampler.join()
    assert result.outcome == "settled", (result.code, result.detail)
    assert token in result.stderr, "the token never came out: the probe proves nothing"
    print(f"{engine}: 40 MiB on stdout: engine log seen={seen[0]}, at most {peak[0]} bytes")
    assert peak[0] <= KEEP_BYTES + SLACK, (
        f"{engine}'s own log of the container held {peak[0]} bytes of a 40 MiB stdout on "
        f"the host's disk while it ran (cap {KEEP_BYTES})"
    )


def test_the_ledger_stays_within_the_output_budget(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """attack2: ledger.jsonl was never pruned -- each line holds the first 64 KiB of stdout
    and of stderr and the whole argv, so N commands added N x (128 KiB + argv) to the host's
    disk (233 KB a command measured). Now the ledger and its one rotated file stay within
    [state] ledger_budget_bytes."""
    # The ledger is written by this process for every arm alike: one row is enough.
    budget = 2 * MIB
    data = data_for(
        "copied_tree", tmp_path, request, output_keep_bytes=MIB // 4, output_budget_bytes=budget
    )
    data["state"]["ledger_budget_bytes"] = budget
    line = "head -c 262144 /dev/zero | tr '\\0' a; head -c 262144 /dev/zero | tr '\\0' b >&2"
    ledger = tmp_path / "state" / "ledger.jsonl"
    with ExecTool(parse_config(data), tree(tmp_path)) as tool:
        for _ in range(24):
            result = tool.exec(["sh", "-c", line, "x" * 65536], timeout=300)
            assert result.outcome == "settled", (result.code, result.detail)
    rotated = ledger.with_name(ledger.name + ".1")
    assert rotated.exists(), "24 commands of 233 KB past a 2 MiB budget rotate the ledger"
    held = (ledger.stat().st_blocks + rotated.stat().st_blocks) * 512
    print(f"24 commands of 256 KiB per stream: the ledger holds {held} bytes (budget {budget})")
    assert held <= budget, f"the ledger holds {held} bytes, past the output budget {budget}"


@pytest.mark.parametrize("row", ["copied_tree", "docker"])
def test_a_sparse_change_never_lands_dense_past_the_budget(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A 256 MiB sparse file costs the copy nothing; keeping it as a change wrote its blob
    out whole (256 MiB of zeros on the host's disk) and only then compared it with the
    4 MiB budget. Sampled from here while the command's changes are kept."""
    budget = 4 * MIB
    data = data_for(row, tmp_path, request, changes_budget_bytes=budget)
    root = tmp_path / "state" / "changes"
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            if root.exists():
                peak[0] = max(peak[0], disk_of(root))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    line = f"dd if=/dev/zero of=sparse.bin bs=1 count=0 seek={256 * MIB} 2>/dev/null; echo made"
    try:
        with ExecTool(parse_config(data), tree(tmp_path)) as tool:
            result = tool.exec(["sh", "-c", line], timeout=300)
    finally:
        done.set()
        sampler.join()
    assert result.outcome == "settled" and "made" in result.stdout, (result.code, result.detail)
    assert result.changes is not None and result.changes.created, "no change: proves nothing"
    print(f"{row}: a 256 MiB sparse change: at most {peak[0]} bytes under changes/")
    assert not result.changes.kept and "budget" in (result.changes.note or "")
    assert peak[0] <= budget + SLACK, (
        f"keeping a 256 MiB sparse change put {peak[0]} bytes on the host's disk "
        f"(changes budget {budget})"
    )


@pytest.mark.parametrize("row", ["copied_tree", "docker"])
def test_many_empty_changes_stay_within_the_budget(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """20000 empty files are 0 bytes of new content, but keeping them costs the host a
    manifest line and a blob file (an inode, a directory entry) each: judged by the blocks
    under changes/ afterwards, against the budget."""
    budget = 2 * MIB
    data = data_for(row, tmp_path, request, changes_budget_bytes=budget)
    root = tmp_path / "state" / "changes"
    line = 'i=0; while [ $i -lt 20000 ]; do : > "e$i"; i=$((i+1)); done; echo made'
    with ExecTool(parse_config(data), tree(tmp_path)) as tool:
        result = tool.exec(["sh", "-c", line], timeout=300)
    assert result.outcome == "settled" and "made" in result.stdout, (result.code, result.detail)
    assert result.changes is not None and result.changes.created >= 20000, result.changes
    held = disk_of(root) + sum(
        os.lstat(os.path.join(top, d)).st_blocks * 512
        for top, dirs, _ in os.walk(root)
        for d in dirs
    )
    print(f"{row}: 20000 empty files kept={result.changes.kept}: {held} bytes under changes/")
    assert held <= budget + SLACK, (
        f"20000 empty changed files left {held} bytes under changes/ (budget {budget})"
    )
