"""runsc (gVisor) under real podman, through the wrapper sprawl-orch writes
(orchestrator/container/gvisor.py): what holds and what changes. These are the facts
docs/MACHINES.md "gVisor" states; each assertion fails if the behaviour moves.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.container.gvisor import ensure_wrapper, runsc_path
from tests.integration.conftest import missing

LABEL = f"sprawl-gvisor-test={secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runsc = runsc_path()
    if runsc is None:
        missing("runsc is not installed (apt-get install runsc; .ci/setup-engines does)")
    return ensure_wrapper(tmp_path_factory.mktemp("state"), runsc)


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    yield
    left = subprocess.run(
        ["podman", "ps", "-aq", "--filter", f"label={LABEL}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if left:
        subprocess.run(["podman", "rm", "-f", *left], capture_output=True, check=False)
    assert left == [], f"containers left behind: {left}"


def _podman(
    runtime: str, image: str, script: str, *flags: str, name: str | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [
        "podman",
        "run",
        "--label",
        LABEL,
        "--runtime",
        runtime,
        "--network",
        "none",
        *flags,
        *(["--name", name] if name else ["--rm"]),
        image,
        "sh",
        "-c",
        script,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_wrapper_is_rewritten_when_tampered(tmp_path: Path) -> None:
    first = ensure_wrapper(tmp_path, "/usr/bin/runsc")
    first.write_text("#!/bin/sh\nexec /bin/true\n")
    again = ensure_wrapper(tmp_path, "/usr/bin/runsc")
    assert again == first
    assert again.read_text() == '#!/bin/sh\nexec /usr/bin/runsc --network=none --oci-seccomp "$@"\n'
    assert again.stat().st_mode & 0o777 == 0o755


def test_bare_runsc_refuses_the_root_network_namespace(podman_image: str) -> None:
    runsc = runsc_path()
    if runsc is None:
        missing("runsc is not installed")
    done = _podman(runsc, podman_image, "true")
    assert done.returncode != 0
    assert "cannot run with network enabled in root network namespace" in done.stderr


def test_command_runs_on_gvisors_kernel(wrapper: Path, podman_image: str) -> None:
    name = f"sprawl-gvisor-{secrets.token_hex(4)}"
    try:
        done = _podman(
            str(wrapper),
            podman_image,
            "uname -r; dmesg | head -1; ls /proc | grep -c '^[0-9]'",
            name=name,
        )
        assert done.returncode == 0, done.stderr
        release, first, pids = done.stdout.splitlines()
        host = subprocess.run(
            ["uname", "-r"], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert release == "4.4.0" != host  # gVisor's fixed uname, not the host's
        assert "Starting gVisor" in first  # the sentry's own dmesg
        assert int(pids) < 10  # /proc lists the sandbox's own tasks only
        inspect = json.loads(
            subprocess.run(
                ["podman", "inspect", name], capture_output=True, text=True, check=True
            ).stdout
        )[0]
        assert inspect["OCIRuntime"] == str(wrapper)  # what verification will compare
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)


def test_memory_limit_kills_the_sandbox(wrapper: Path, podman_image: str) -> None:
    name = f"sprawl-gvisor-{secrets.token_hex(4)}"
    try:
        done = _podman(
            str(wrapper),
            podman_image,
            'x=a; while true; do x="$x$x"; done',
            "--memory",
            "32m",
            "--memory-swap",
            "32m",
            name=name,
        )
        assert done.returncode == 137
        state = json.loads(
            subprocess.run(
                ["podman", "inspect", name], capture_output=True, text=True, check=True
            ).stdout
        )[0]["State"]
        # `podman run` from elsewhere than the bundle: conmon 2.1.6 writes its oom marker
        # into its cwd (docs/MACHINES.md), so OOMKilled is false here as under runc; the
        # arm starts conmon in the bundle and reports it (test_gvisor_arm.py)
        assert state["OOMKilled"] is False
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)


def test_pids_limit_counts_the_sentrys_threads(wrapper: Path, podman_image: str) -> None:
    fork = "i=0; while [ $i -lt 200 ]; do sleep 3 & i=$((i+1)); done; echo bg=$i"
    # the limit is on the host cgroup, where gVisor's sentry threads live: a fork bomb
    # does not see EAGAIN in the guest, the whole sandbox fails (no output at all)
    limited = _podman(str(wrapper), podman_image, fork, "--pids-limit", "64")
    assert limited.returncode != 0 and "bg=200" not in limited.stdout
    # a limit below the sentry's own thread count cannot even start the sandbox; where
    # startup runs out varies ("cannot create sandbox: …", "starting sandbox: failed to
    # setupFS: …"), always the sandbox's own start, before the command runs
    tiny = _podman(str(wrapper), podman_image, "echo ran", "--pids-limit", "20")
    assert tiny.returncode != 0 and "ran" not in tiny.stdout
    assert "sandbox" in tiny.stderr
    roomy = _podman(str(wrapper), podman_image, fork, "--pids-limit", "4096")
    assert roomy.returncode == 0 and "bg=200" in roomy.stdout
