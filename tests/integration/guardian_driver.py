"""An orchestrator for the guardian tests to SIGKILL (not a test module).

    python guardian_driver.py SPEC_JSON

SPEC: {"session", "arm": "docker"|"podman"|"copied_tree"|"raw-docker"|"raw-podman", "workdir",
"scratch", "state", "image" (container arms), "commands": [[argv...], ...], "run", "timeout",
"memory_limit" (optional: each run gets a cgroup with this memory limit, cgroups.py), "hold"
(optional: a gate path; see hold_after_create)}.

The `raw-*` arms skip ExecTool: they announce a container through the Guardian client and
create it with the engine CLI found on PATH (a test may put a slow wrapper first), labelled
like the container arm labels its containers.

It builds an ExecTool exactly as a harness would, warms the arm up (admission runs a probe
container; that is not what the tests want to interrupt), prints `ready`, then runs the
commands one after another, printing `exec N` before and `done N` after each, and `closed`
after ExecTool.close(). Every line is flushed so the test can time its SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sprawl_orch.config import parse_config  # noqa: E402
from sprawl_orch.runs.guardian_client import Guardian  # noqa: E402
from sprawl_orch.runs.shares import UNSET, Shares  # noqa: E402
from sprawl_orch.tool.exec_tool import ExecTool  # noqa: E402

# Passed into every command (and container) so the chaos test can find any process the
# commands left behind by its environment.
MARK = "SPRAWL_CHAOS_MARK"


def say(line: str) -> None:
    print(line, flush=True)


def raw(spec: dict[str, object], engine: str) -> None:
    session = str(spec["session"])
    guardian = Guardian(session, [engine])
    cli = shutil.which(engine)
    assert cli is not None
    extra = ["--runtime", "runc"] if engine == "podman" else []
    say("ready")
    for n, argv in enumerate(spec["commands"], 1):  # type: ignore[arg-type]
        name = f"sprawl-{session}-{n}"
        say(f"exec {n}")
        guardian.expect(name)
        done = subprocess.run(
            [
                cli,
                "create",
                *extra,
                "--name",
                name,
                "--label",
                f"sprawl.session={session}",
                "--label",
                f"sprawl.run={spec.get('run', 'default')}",
                "--network",
                "none",
                str(spec["image"]),
                *argv,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        guardian.created(name, done.stdout.split()[-1])
        say(f"done {n}")
    guardian.close()
    say("closed")


def hold_after_create(gate: str) -> None:
    """Patch the watcher so the container arm stops between create and start: after
    announcing `created` it writes GATE.reached and waits for GATE to exist, so the test can
    SIGKILL this process at exactly that point. (The product code has no hook for it.)"""
    told = Guardian.created

    def created(self: Guardian, name: str, container_id: str) -> None:
        told(self, name, container_id)
        Path(gate + ".reached").write_text(name)
        deadline = time.monotonic() + 600
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)

    Guardian.created = created  # type: ignore[method-assign]


def main() -> None:
    spec = json.loads(sys.argv[1])
    arm = spec["arm"]
    if arm.startswith("raw-"):
        raw(spec, arm.removeprefix("raw-"))
        return
    sandbox: dict[str, object] = {
        "scratch_dir": spec["scratch"],
        "env_passthrough": [MARK],
        "window_seconds": float(spec.get("timeout", 600)),
    }
    if arm == "copied_tree":
        sandbox["arm"] = "copied_tree"
    else:
        sandbox["arm"] = "container"
        sandbox["container"] = {"engine": arm, "images": {arm: spec["image"]}}
    config = parse_config({"sandbox": sandbox, "state": {"dir": spec["state"]}})
    limit = spec.get("memory_limit")
    shares = Shares.cpu_and_memory(int(limit)) if limit else UNSET
    tool = ExecTool(
        config, Path(spec["workdir"]), session=spec["session"], record=False, shares=shares
    )
    tool.arm().prepare(tool.workdir)
    if spec.get("hold"):
        hold_after_create(spec["hold"])  # after prepare: admission's probe is not held
    say("ready")
    for n, argv in enumerate(spec["commands"], 1):
        say(f"exec {n}")
        result = tool.exec(argv, run=spec.get("run", "default"))
        say(f"done {n} {result.outcome} {result.exit_code} {result.detail or ''}".rstrip())
    tool.close()
    say("closed")


if __name__ == "__main__":
    main()
