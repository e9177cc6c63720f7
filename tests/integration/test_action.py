"""The GitHub Action's scripts (action.yml → .github/action/), run here as GitHub runs them: as
a non-root account, with the runner's variables as plain files, the inputs in the environment.

install.sh installs sprawl-orch from a copy of this checkout into a venv of its own (from the
package index pip's config names, as on a runner); `action.py prepare` writes the config and
builds and pins an image; `action.py run` runs the example suite confined and must report
exactly what the result says, in the outputs, the job summary and the artifact files.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import missing

ACCOUNT = "sprawl-rootless"
ROOT = Path(__file__).resolve().parents[2]
SOURCE_PARTS = ("orchestrator", "guardian", "native_fallbacks", "images", ".github")
SOURCE_FILES = ("pyproject.toml", "README.md", "action.yml", "LICENSE")


@dataclass
class Runner:
    """One fake runner: the account's RUNNER_TEMP, output files and a checkout of the example."""

    home: Path
    source: Path
    checkout: Path
    temp: Path
    outside: Path
    port: int

    def run(
        self, step: list[str], inputs: dict[str, str], timeout: float = 900
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
        output, summary = self.temp / "github-output", self.temp / "step-summary"
        for path in (output, summary):
            path.write_text("")
            os.chown(path, *_ids())
        env = {
            "HOME": str(self.home),
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "LANG": "C.UTF-8",
            "USER": ACCOUNT,
            "RUNNER_TEMP": str(self.temp),
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_JOB": "confined",
            **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
            **{f"SPRAWL_ACTION_{k.upper().replace('-', '_')}": v for k, v in inputs.items()},
        }
        done = subprocess.run(
            [
                "runuser",
                "-u",
                ACCOUNT,
                "--",
                "env",
                "-i",
                *(f"{k}={v}" for k, v in env.items()),
                *step,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.checkout,
        )
        outputs = dict(
            line.split("=", 1) for line in output.read_text().splitlines() if "=" in line
        )
        return done, outputs, summary.read_text()

    def action(
        self, step: str, inputs: dict[str, str]
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
        python = str(self.temp / "sprawl-orch" / "bin" / "python")
        script = str(self.source / ".github" / "action" / "action.py")
        return self.run([python, script, step], inputs)


def _ids() -> tuple[int, int]:
    account = pwd.getpwnam(ACCOUNT)
    return account.pw_uid, account.pw_gid


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    if os.geteuid() != 0:
        missing("switching to the runner account needs root")
    try:
        account = pwd.getpwnam(ACCOUNT)
    except KeyError:
        missing(f"no account {ACCOUNT} (run .ci/setup-engines)")
    uid, gid = account.pw_uid, account.pw_gid
    home = Path(account.pw_dir)
    base = Path(tempfile.mkdtemp(prefix="sprawl-action-", dir=home))
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        source = base / "action"
        for part in SOURCE_PARTS:
            shutil.copytree(
                ROOT / part,
                source / part,
                ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
            )
        for name in SOURCE_FILES:
            if (ROOT / name).exists():
                shutil.copy2(ROOT / name, source / name)
        checkout = base / "checkout"
        shutil.copytree(ROOT / ".github" / "action" / "example", checkout / "suite")
        temp = base / "runner-temp"
        temp.mkdir()
        outside = base / "outside-the-tree.txt"
        outside.write_text("the caller's, not the command's\n")
        for path in (base, *base.rglob("*")):
            os.lchown(path, uid, gid)
        r = Runner(home, source, checkout, temp, outside, listener.getsockname()[1])
        done, _, _ = r.run(
            ["bash", str(source / ".github" / "action" / "install.sh")],
            {"source": str(source), "arm": "native"},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "sprawl-orch, version" in done.stdout
        yield r
    finally:
        listener.close()
        # The exec server the installed sprawl-orch started would idle on, running code from
        # the venv removed below.
        stop = base / "runner-temp" / "sprawl-orch" / "bin" / "sprawl-orch"
        if stop.exists():
            subprocess.run(
                ["runuser", "-u", ACCOUNT, "--", str(stop), "server", "stop"],
                capture_output=True,
                timeout=60,
                cwd="/",
            )
        shutil.rmtree(base, ignore_errors=True)


def _suite_command(r: Runner) -> str:
    return (
        f"SPRAWL_EXAMPLE_PORT={r.port} SPRAWL_EXAMPLE_OUTSIDE={r.outside} "
        "python3 -m unittest discover -s suite -v"
    )


def test_native_run_reports_what_the_result_says(runner: Runner) -> None:
    done, _, _ = runner.action("prepare", {"arm": "native"})
    assert done.returncode == 0, done.stderr
    assert 'arm = "native"' in done.stdout
    done, outputs, summary = runner.action("run", {"command": _suite_command(runner)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # The suite's own verdict (unittest writes stderr) reached the step's log: on stdout, the
    # one stream the action fences from the runner's workflow commands.
    assert "Ran 4 tests" in done.stdout and "OK" in done.stdout
    result = json.loads(Path(outputs["result"]).read_text())
    assurances = result["confinement"]["assurances"]
    assert outputs["status"] == "0" and outputs["arm"] == result["arm"] == "linux_namespaces"
    for axis, held in assurances.items():
        assert outputs[axis.replace("_", "-")] == held
        assert f"| {axis} | {held} |" in summary
    assert assurances["filesystem"] == "yes" and assurances["network"] == "yes"
    # The write landed in the copy, never in the checkout; the artifact shows it as a change.
    assert not (runner.checkout / "suite" / "written-by-the-suite.txt").exists()
    diff = (Path(outputs["artifacts"]) / "changes.diff").read_text()
    assert "written-by-the-suite.txt" in diff
    assert outputs["artifact-name"].startswith("sprawl-orch-confined-")


def test_the_step_fails_with_the_commands_status(runner: Runner) -> None:
    runner.action("prepare", {"arm": "native"})
    done, outputs, summary = runner.action("run", {"command": "echo to-the-log; exit 3"})
    assert done.returncode == 3 and outputs["status"] == "3"
    assert "to-the-log" in done.stdout
    assert "status **3**" in summary


def test_a_window_that_passes_is_124(runner: Runner) -> None:
    runner.action("prepare", {"arm": "native"})
    done, outputs, _ = runner.action("run", {"command": "sleep 30", "timeout": "1"})
    assert done.returncode == 124 and outputs["status"] == "124"


@pytest.mark.parametrize(
    ("inputs", "said"),
    [
        ({"arm": 'native"\nwarm = true'}, "input 'arm'"),
        ({"engine": "docker; touch /tmp/pwned"}, "input 'engine'"),
        ({"config": "nope.toml"}, "no such file"),
        ({"image": "busybox", "dockerfile": "Dockerfile"}, "both set"),
        ({"image": "$(id)"}, "not a recipe"),
    ],
)
def test_bad_inputs_are_named_and_nothing_runs(
    runner: Runner, inputs: dict[str, str], said: str
) -> None:
    done, _, _ = runner.action("prepare", inputs)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not Path("/tmp/pwned").exists()


def test_config_with_arm_is_refused(runner: Runner) -> None:
    config = runner.checkout / "mine.toml"
    config.write_text('[sandbox]\narm = "copied_tree"\n')
    try:
        done, _, _ = runner.action("prepare", {"config": "mine.toml", "arm": "native"})
        assert done.returncode == 2 and "set [sandbox] arm" in done.stderr
    finally:
        config.unlink()


def test_container_arm_on_rootless_podman_with_a_built_image(runner: Runner) -> None:
    if shutil.which("podman") is None:
        missing("podman is not installed (run .ci/setup-engines)")
    done, _, _ = runner.action(
        "prepare", {"arm": "container", "engine": "podman", "image": "busybox"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        "[sandbox.container.images]"
        in (runner.temp / "sprawl-orch-action" / "sprawl.toml").read_text()
    )
    command = f"SPRAWL_EXAMPLE_PORT={runner.port} sh suite/check.sh"
    done, outputs, summary = runner.action("run", {"command": command})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "example suite: 2 checks passed" in done.stdout
    assert outputs["arm"] == "container" and outputs["network"] == "yes"
    assert outputs["filesystem"] == "yes" and "| network | yes |" in summary


def test_container_arm_with_a_dockerfile_built_and_pinned(runner: Runner) -> None:
    if shutil.which("podman") is None:
        missing("podman is not installed (run .ci/setup-engines)")
    # The Dockerfile's base must be local (no registry is reached): the busybox recipe, built
    # in this account's podman (a no-op when the test above already built it).
    done, _, _ = runner.action(
        "prepare", {"arm": "container", "engine": "podman", "image": "busybox"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    dockerfile = runner.checkout / "Containerfile.suite"
    dockerfile.write_text(
        "FROM sprawl/busybox:latest\nRUN echo made-by-the-dockerfile > /etc/suite-marker\n"
    )
    os.chown(dockerfile, *_ids())
    try:
        inputs = {"arm": "container", "engine": "podman", "dockerfile": dockerfile.name}
        done, _, _ = runner.action("prepare", inputs)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        config = (runner.temp / "sprawl-orch-action" / "sprawl.toml").read_text()
        # Pinned by the image's fixed ID: the command runs exactly what was built, not a tag.
        assert re.search(r'^podman = "(sha256:)?[0-9a-f]{64}"( #.*)?$', config, re.M), config
        done, outputs, summary = runner.action("run", {"command": "cat /etc/suite-marker"})
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "made-by-the-dockerfile" in done.stdout
        assert outputs["status"] == "0" and outputs["arm"] == "container"
        assert "| filesystem | yes |" in summary
    finally:
        dockerfile.unlink()
