"""A dockerd whose config file changed after it started answers /info with what it loaded,
not with what the file now says, until it reloads (SIGHUP, seconds later on a loaded host):
an answer read in between must not be kept under the file's new stamp and outlive the
reload (engines/docker_daemon.py). A real dockerd of this test's own (its own data root,
exec root, socket, pidfile and config file; the house's two are never touched)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.core import served_memo
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.docker_daemon import KIND, daemon_key

RUNSC_ARGS = ["--network=none", "--oci-seccomp"]


def _write_config(conf: Path, args: list[str]) -> None:
    runsc = shutil.which("runsc") or "/usr/bin/runsc"
    made = conf.with_suffix(".new")
    made.write_text(json.dumps({"runtimes": {"runsc": {"path": runsc, "runtimeArgs": args}}}))
    made.replace(conf)  # as an editor saves it: a new file under the same name


def _fresh_info(host: str) -> dict[str, Any]:
    import docker

    api = docker.APIClient(base_url=host, version="auto", timeout=60)
    try:
        return dict(api.info())
    finally:
        api.close()


class Daemon:
    def __init__(self, place: Path) -> None:
        if shutil.which("dockerd") is None:
            pytest.fail("dockerd is not installed (.ci/setup-engines installs it)")
        self.conf = place / "daemon.json"
        self.sock = place / "d.sock"
        self.host = f"unix://{self.sock}"
        _write_config(self.conf, RUNSC_ARGS)
        self.log = (place / "d.log").open("w")
        self.proc = subprocess.Popen(
            ["dockerd", "--host", self.host, "--data-root", str(place / "root"),
             "--exec-root", str(place / "x"), "--pidfile", str(place / "d.pid"),
             "--iptables=false", "--bridge=none", "--config-file", str(self.conf)],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 180  # a first start on a loaded machine
        while True:
            assert self.proc.poll() is None, (place / "d.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the test's dockerd did not answer in 180 s"
            try:
                _fresh_info(self.host)
                return
            except Exception:
                time.sleep(0.5)

    def runsc_args(self) -> str:
        return " ".join(_fresh_info(self.host)["Runtimes"]["runsc"].get("runtimeArgs") or [])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    served_memo.take(KIND)
    # short: the socket's path and containerd's under the exec root are at most 107 bytes
    with tempfile.TemporaryDirectory(prefix="ad-", dir="/var/tmp") as made:
        started = Daemon(Path(made))
        try:
            yield started
        finally:
            started.stop()
            served_memo.take(KIND)


def _runsc_args(identity: dict[str, Any]) -> str:
    return dict((r, a) for r, a in identity["facts"]["runtime_args"])["runsc"]


def test_an_answer_read_before_the_reload_is_not_kept_past_it(daemon: Daemon) -> None:
    environ = {**os.environ, "DOCKER_HOST": daemon.host}
    assert _runsc_args(DockerEngine(environ=environ).identity()) == " ".join(RUNSC_ARGS)
    # runsc's --oci-seccomp dropped from the file; the daemon has not reloaded yet
    _write_config(daemon.conf, ["--network=none"])
    before = DockerEngine(environ=environ)
    assert _runsc_args(before.identity()) == " ".join(RUNSC_ARGS)  # the truth, still
    before.close()
    os.kill(daemon.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 120
    while daemon.runsc_args() != "--network=none":
        assert time.monotonic() < deadline, "the test's dockerd did not reload in 120 s"
        time.sleep(0.5)
    after = DockerEngine(environ=environ)
    try:
        # the daemon now runs runsc without --oci-seccomp (gVisor loads no seccomp profile):
        # an admission made from the answer kept before the reload would claim it does
        assert _runsc_args(after.identity()) == "--network=none"
    finally:
        after.close()


def test_a_daemon_whose_file_never_changed_is_still_kept(daemon: Daemon) -> None:
    """What held: a config file older than the daemon keys it (no round trips)."""
    assert daemon_key(daemon.host) is not None
