"""output_keep.py: the per-stream cut, the budget, and the sweep of outputs/<session>/ whose
owners died (a real second process holds the claim, then is SIGKILLed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sprawl_orch.runs.output_keep import OUTPUT_CAP, OutputKeeping, claim, sweep

OWNER = """
import sys, time
from pathlib import Path
from sprawl_orch.runs.output_keep import claim
claim(Path(sys.argv[1]))
print("claimed", flush=True)
time.sleep(600)
"""


def test_a_stream_is_cut_at_keep_bytes_and_the_cut_is_named(tmp_path: Path) -> None:
    out = tmp_path / "run" / "stdout"
    out.parent.mkdir()
    out.write_bytes(b"y" * (OUTPUT_CAP * 4))
    (tmp_path / "run" / "stderr").write_bytes(b"")
    keeping = OutputKeeping(tmp_path / "kept", keep_bytes=OUTPUT_CAP * 2, budget_bytes=1 << 30)
    stdout, stderr, record = keeping.keep("h-1", out, tmp_path / "run" / "stderr", keep=True)
    assert stdout.full is not None and os.path.getsize(stdout.full) == OUTPUT_CAP * 2
    assert f"the first {OUTPUT_CAP * 2} bytes are kept" in stdout.text
    assert record is not None and record["stdout"] == {
        "bytes": OUTPUT_CAP * 4,
        "kept_bytes": OUTPUT_CAP * 2,
    }
    assert stderr.full is None and record["evicted"] == []


def test_output_larger_than_the_budget_is_not_kept_and_evicts_nothing(tmp_path: Path) -> None:
    keeping = OutputKeeping(tmp_path / "kept", keep_bytes=1 << 30, budget_bytes=OUTPUT_CAP * 3)
    olds = []
    for n in range(2):
        run = tmp_path / f"run{n}"
        run.mkdir()
        (run / "stdout").write_bytes(b"o" * (OUTPUT_CAP + 1))
        out, _, record = keeping.keep(f"h-{n}", run / "stdout", run / "err", keep=True)
        assert out.full is not None and record is not None and not record["evicted"]
        olds.append(f"h-{n}")
    big = tmp_path / "big"
    big.mkdir()
    (big / "stdout").write_bytes(b"b" * (OUTPUT_CAP * 4))
    out, _, record = keeping.keep("h-big", big / "stdout", big / "err", keep=True)
    assert record is not None and "exceed" in record["not_kept"] and out.full is None
    assert record["evicted"] == [] and all((tmp_path / "kept" / h).is_dir() for h in olds)


def test_only_the_outputs_of_dead_owners_are_swept(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    owners = {}
    for name in ("live", "dead"):
        owners[name] = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(outputs / name)], stdout=subprocess.PIPE, text=True
        )
        assert owners[name].stdout is not None
        assert owners[name].stdout.readline().strip() == "claimed"
        (outputs / name / "1").mkdir()
    owners["dead"].kill()
    owners["dead"].wait()
    fresh = outputs / "unclaimed-new"
    fresh.mkdir()  # between a mkdir and its claim: young, so left alone
    old = outputs / "unclaimed-old"
    old.mkdir()
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    mine = outputs / "mine"
    fd = claim(mine)
    try:
        removed = sweep(outputs, keep=mine)
        assert sorted(removed) == ["dead", "unclaimed-old"], removed
        assert (outputs / "live" / "1").is_dir() and fresh.is_dir() and mine.is_dir()
    finally:
        os.close(fd)
        owners["live"].kill()
        owners["live"].wait()
