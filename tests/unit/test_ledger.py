"""The ledger: whole lines under concurrent writers, torn lines skipped, no env values."""

from __future__ import annotations

import json
import multiprocessing
import stat
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.ledger import Ledger

WRITERS = 6
LINES_PER_WRITER = 600


def _size(writer: int, seq: int) -> int:
    # Mostly small lines, every 5th past PIPE_BUF (4096), every 50th past 64 KiB.
    if seq % 50 == 0:
        return 70_000 + writer * 13
    if seq % 5 == 0:
        return 4097 + (seq * 131 + writer * 17) % 20_000
    return 1 + (seq * 37 + writer) % 900


def _write_many(path: str, writer: int) -> None:
    ledger = Ledger(Path(path))
    for seq in range(LINES_PER_WRITER):
        size = _size(writer, seq)
        # Non-ASCII padding: the byte length differs from the character count.
        pad = ("é-" * size)[:size]
        ledger.append({"writer": writer, "seq": seq, "size": size, "pad": pad})


def test_concurrent_processes_never_tear_a_line(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.jsonl"
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    workers = [
        context.Process(target=_write_many, args=(str(path), writer)) for writer in range(WRITERS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
        assert worker.exitcode == 0

    raw_lines = path.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""  # the file ends with a newline
    assert len(raw_lines) - 1 == WRITERS * LINES_PER_WRITER
    for raw in raw_lines[:-1]:
        json.loads(raw)  # every line parses on its own

    ledger = Ledger(path)
    seen: dict[int, list[int]] = {writer: [] for writer in range(WRITERS)}
    big = 0
    for record in ledger.read():
        assert len(record["pad"]) == record["size"] == _size(record["writer"], record["seq"])
        seen[record["writer"]].append(record["seq"])
        big += record["size"] > 4096
    assert ledger.skipped == 0
    for seqs in seen.values():
        # One writer's lines stay in its own order; none lost, none doubled.
        assert seqs == list(range(LINES_PER_WRITER))
    assert big == WRITERS * sum(1 for s in range(LINES_PER_WRITER) if s % 5 == 0)


def test_append_then_read_round_trips(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "deep" / "er" / "ledger.jsonl")
    first = {
        "arm": "copied_tree",
        "outcome": "settled",
        "exit_code": 0,
        "stdout": "日本\ufffd",
        "env": ["LANG", "PATH"],
        "interpreter": "sh",
    }
    ledger.append(first)
    ledger.append(
        {
            "arm": "container",
            "outcome": "backgrounded",
            "handle": "s-2",
            "full": tmp_path / "kept" / "stdout",
        }
    )
    records = list(ledger.read())
    assert records[0] == first
    assert records[1]["full"] == str(tmp_path / "kept" / "stdout")
    assert ledger.skipped == 0
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o600
    assert ledger.path.read_text(encoding="utf-8").count("\n") == 2


def test_read_skips_and_counts_torn_and_invalid_lines(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    good = [{"n": n} for n in range(3)]
    path.write_bytes(
        json.dumps(good[0]).encode()
        + b"\n"
        + b'{"n": 99, "stdout": "cut in th\n'  # torn mid-line (a writer died)
        + json.dumps(good[1]).encode()
        + b"\n"
        + b"[1, 2, 3]\n"  # JSON, but not a record
        + b"\xff\xfe not utf-8\n"
        + b"\n"  # blank lines are not counted as skipped
        + json.dumps(good[2]).encode()
        + b"\n"
        + b'{"n": 100'  # unterminated tail: a write in progress
    )
    ledger = Ledger(path)
    assert list(ledger.read()) == good
    assert ledger.skipped == 4
    # A later read counts afresh.
    assert list(ledger.read()) == good
    assert ledger.skipped == 4


def test_missing_ledger_reads_empty(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "none.jsonl")
    assert list(ledger.read()) == []
    assert ledger.skipped == 0


@pytest.mark.parametrize(
    "result",
    [
        {"arm": "x", "env": {"PATH": "/usr/bin"}},
        {"arm": "x", "env": ["PATH", "API_TOKEN=hunter2"]},
        {"arm": "x", "env": "PATH"},
        {"arm": "x", "env": ["PATH", 3]},
        {"arm": "x", "env": ["PATH"], "env_values": {"PATH": "/usr/bin"}},
        {"arm": "x", "container": {"spec": [{"env_values": ["/usr/bin"]}]}},
    ],
    ids=[
        "env-dict",
        "env-name-with-value",
        "env-str",
        "env-non-str",
        "env_values",
        "nested-env_values",
    ],
)
def test_env_values_are_refused_and_nothing_written(tmp_path: Path, result: dict[str, Any]) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    with pytest.raises(SprawlError) as caught:
        ledger.append(result)
    assert caught.value.code is ErrorCode.BAD_REQUEST
    assert "hunter2" not in str(caught.value)
    assert "/usr/bin" not in str(caught.value)
    assert not ledger.path.exists()


def test_env_names_only_are_accepted(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append({"arm": "x", "env": ("LANG", "PATH")})
    assert list(ledger.read()) == [{"arm": "x", "env": ["LANG", "PATH"]}]


def test_unserialisable_result_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    with pytest.raises(SprawlError) as caught:
        ledger.append({"arm": "x", "odd": object()})
    assert caught.value.code is ErrorCode.BAD_REQUEST
    assert not ledger.path.exists()


def test_unwritable_place_is_storage_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    ledger = Ledger(blocker / "ledger.jsonl")
    with pytest.raises(SprawlError) as caught:
        ledger.append({"arm": "x"})
    assert caught.value.code is ErrorCode.STORAGE_FATAL
    assert caught.value.subject == str(blocker / "ledger.jsonl")


def test_a_full_ledger_rotates_and_both_files_stay_within_the_budget(tmp_path: Path) -> None:
    """Past half the budget the ledger becomes <ledger>.1 (replacing the older one) and the
    line goes to a new file; read() yields the rotated file's records first, in order."""
    path = tmp_path / "ledger.jsonl"
    budget = 1024 * 1024
    ledger = Ledger(path, budget)
    for n in range(40):
        ledger.append({"n": n, "stdout": "x" * 100_000, "env": []})
    rotated = path.with_name(path.name + ".1")
    assert rotated.exists()
    assert path.stat().st_size + rotated.stat().st_size <= budget
    seen = [r["n"] for r in ledger.read()]
    assert seen == list(range(seen[0], 40)) and seen[0] > 0, seen
    assert ledger.skipped == 0


def test_writers_that_waited_on_a_rotated_file_write_to_the_new_one(tmp_path: Path) -> None:
    """Two processes appending at once across many rotations: every line whole, none lost
    beyond what rotation dropped on purpose (the records read are a contiguous tail of each
    writer's sequence)."""
    import multiprocessing

    path = tmp_path / "ledger.jsonl"

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_rotating, args=(path, w)) for w in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    ledger = Ledger(path)
    records = list(ledger.read())
    assert ledger.skipped == 0
    assert records, "nothing read back"
    for w in ("a", "b"):
        # A writer that finished first may have been rotated out whole (2 x 4 MB through a
        # 1 MiB budget); whatever is left of it is its last records, none missing between.
        ns = [r["n"] for r in records if r["w"] == w]
        assert ns == list(range(200 - len(ns), 200)), (w, ns[:5], ns[-5:])


def _write_rotating(path: Path, w: str) -> None:
    ledger = Ledger(path, 1024 * 1024)
    for n in range(200):
        ledger.append({"w": w, "n": n, "stdout": "y" * 20_000, "env": []})
