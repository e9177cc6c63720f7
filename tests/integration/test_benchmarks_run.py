"""Every benchmark script still runs (tiny sizes) and prints its comparison: numbers are
read from full runs, but a script that no longer starts would be found only when needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# script -> (tiny arguments, a line fragment its comparison always prints)
SMALL: dict[str, tuple[list[str], str]] = {
    "cli_chaos.py": (["--kills", "2"], "processes left"),
    "cli_oneshot.py": (["--reps", "1", "--big-reps", "1", "--files", "50"], "ratio"),
    "cli_profile.py": (["--reps", "1", "--files", "50"], "with a client start ratio"),
    "changes_walk.py": (["--files", "200", "--reps", "1"], "ratio ours / raw"),
    "apply_cost.py": (["--files", "50", "--reps", "1"], "ratio ours / raw"),
    "copy_sync.py": (["--files", "200", "--reps", "1"], "rsync -a --delete --checksum"),
    "native_exec.py": (["--reps", "2"], "ratio"),
    "container_exec.py": (["--reps", "1", "--cli-reps", "1"], "userns - plain"),
    "container_steps.py": (["--reps", "1"], "docker create: CLI (our argv)"),
    "guardian.py": (["--runs", "1"], "fastest raw removal"),
    "warm_exec.py": (["--reps", "2"], "ratio warm / exec"),
    "warm_served_ab.py": (["--reps", "1"], "served (this) / run --rm"),
    "egress_proxy.py": (["--reps", "2", "--mb", "1"], "listener inside a bwrap namespace"),
    "workspace_exec.py": (["--files", "100", "--reps", "1"], "workspace command"),
    "python_arm.py": (["--reps", "1", "--cli-reps", "1"], "ratio CLI python arm / host python"),
    "secrets_proxy.py": (["--requests", "20", "--rounds", "1"], "ratio intercepted"),
    "secrets_wakeups.py": (
        ["--requests", "20", "--rounds", "1", "--no-trace"],
        "switches per request",
    ),
    # "." as the base tree: this tree against itself (the A/B needs another one to mean anything)
    "secrets_heads_ab.py": (["--rounds", "1", "--calls", "10", "."], "branch/base"),
    "podman_service_floor.py": (["--reps", "1"], "every guarantee"),
    # Winch alone: its compile is ~1/5 of Cranelift's (the other two would add ~20 CPU s)
    "python_compilers.py": (["--only", "winch", "--reps", "1"], '"limits"'),
    "python_tiering.py": (["--reps", "1"], "ratio after / before"),
}


def test_every_benchmark_is_listed() -> None:
    assert sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")) == sorted(SMALL)


@pytest.mark.parametrize("script", sorted(SMALL))
def test_benchmark_runs(script: str, docker_image: str, podman_image: str) -> None:
    # The image fixtures make sure both engines answer (CI fails without them).
    args, fragment = SMALL[script]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert fragment in done.stdout, done.stdout
