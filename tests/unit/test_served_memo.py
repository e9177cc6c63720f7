"""core/served_memo.py: a fact is recalled under the very key it was learned with, travels
back over a real socket pair (one message, a second one drops the batch: someone else's), and
a changed input (a rebuilt busybox) is asked about again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest

from sprawl_orch.container import egress_hold
from sprawl_orch.core import served_memo


def test_a_fact_travels_to_the_server_and_only_under_its_key() -> None:
    served_memo.learn("unit-kind", ["a", 1], True)
    learned, teach = served_memo.channel()
    try:
        served_memo.send_learned(teach)
        os.close(teach)
        served_memo._memo.clear()  # the server's memory: not this call's
        assert served_memo.recall("unit-kind", ["a", 1]) is served_memo.MISS
        served_memo.take_learned(learned)
    finally:
        os.close(learned)
    assert served_memo.recall("unit-kind", ["a", 1]) is True
    assert served_memo.recall("unit-kind", ["a", 2]) is served_memo.MISS
    assert served_memo.recall("other-kind", ["a", 1]) is served_memo.MISS


def test_bad_or_oversized_batches_teach_nothing() -> None:
    for data in (b"not json", b'"a string"', b"[" + b"1," * served_memo.BATCH_LIMIT + b"1]"):
        learned, teach = served_memo.channel()
        before = dict(served_memo._memo)
        try:
            # too large a message for the buffer: what was written is over the limit anyway
            with contextlib.suppress(OSError):
                os.write(teach, data)
            os.close(teach)
            served_memo.take_learned(learned)
        finally:
            os.close(learned)
        assert served_memo._memo == before


def test_a_second_message_on_the_channel_drops_the_batch() -> None:
    """A forger on the call's channel (a same-uid command) writes before the call's own batch:
    two messages, so neither is the call's for sure, and nothing is kept."""
    slot = served_memo._slot("unit-kind", ["forged"])
    forged = ("{" + json.dumps(slot) + ':true,"x":').encode()
    served_memo.learn("unit-kind", ["real"], True)
    served_memo._memo.clear()
    learned, teach = served_memo.channel()
    try:
        os.write(teach, forged)
        served_memo.send_learned(teach)  # `{...}` completes the forger's JSON on a pipe
        os.close(teach)
        served_memo.take_learned(learned)
    finally:
        os.close(learned)
    assert served_memo.recall("unit-kind", ["forged"]) is served_memo.MISS
    assert served_memo.recall("unit-kind", ["real"]) is served_memo.MISS


def test_a_changed_busybox_is_asked_about_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "busybox"
    fake.write_text("#!/bin/sh\n")  # ldd: "not a dynamic executable"
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert egress_hold.static_busybox() == str(fake)
    dynamic = shutil.which("ls")
    assert dynamic is not None
    fake.unlink()
    shutil.copy(os.path.realpath(dynamic), fake)  # a new inode: a dynamic executable
    assert egress_hold.static_busybox() is None


def test_a_fact_too_large_for_the_batch_leaves_the_others_their_way() -> None:
    """One large fact (a guard on a machine of many accounts) is left out, not the batch."""
    served_memo._learned.clear()
    served_memo.learn("unit-kind", ["small"], True)
    served_memo.learn("unit-kind", ["large"], "x" * served_memo.BATCH_LIMIT)
    learned, teach = served_memo.channel()
    try:
        served_memo.send_learned(teach)
        os.close(teach)
        served_memo._memo.clear()
        served_memo.take_learned(learned)
    finally:
        os.close(learned)
    assert served_memo.recall("unit-kind", ["small"]) is True
    assert served_memo.recall("unit-kind", ["large"]) is served_memo.MISS
