"""`sprawl-orch exec` SIGKILLed at random moments of its first 1.5 s, admission included,
on docker and podman: nothing of this run may be left (benchmarks/cli_chaos.py counts by
its own directory and marker, so other tests on the same engines are never counted).

CI runs KILLS of them (~15 s); the script's default is 100 (the issue's evidence)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KILLS = 12


def test_sigkills_in_the_first_seconds_leave_nothing(docker_image: str, podman_image: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cli_chaos.py"), "--kills", str(KILLS)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert f"{KILLS} SIGKILLs" in done.stdout
    for line in (
        "containers left: docker 0, podman 0",
        "probe directories left: 0",
        "scratch copies left: 0",
        "processes left: 0",
    ):
        assert line in done.stdout, done.stdout
