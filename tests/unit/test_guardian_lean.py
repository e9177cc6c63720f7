"""The guardian starts lean (issue 28): it is started at every session's first command, while
the orchestrator syncs and creates, so its start must not pay for the docker SDK (~200-300 ms of
CPU to import) nor for the copy's walk (the reaper once imported copy.sync for its tree
removal). Read from the interpreter's own import log of a real start."""

from __future__ import annotations

import subprocess
import sys


def test_the_guardian_starts_without_the_docker_sdk_or_the_copy() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sprawl_orch.guardian", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "sprawl_orch.guardian.reaper" in loaded, "the log is read: the reaper is there"
    assert "sprawl_orch.engines.sweep" in loaded, "and the one engine layer"
    heavy = sorted(
        m
        for m in loaded
        if m in ("docker", "requests", "urllib3") or m.startswith(("docker.", "sprawl_orch.copy"))
    )
    assert heavy == []
