"""A dockerd whose config file changed after it started answers /info with what it loaded,
not with what the file now says, until it reloads (SIGHUP, seconds later on a loaded host):
an answer read in between must not be kept under the file's new stamp and outlive the
reload (engines/docker_daemon.py). A real dockerd of this test's own (its own data root,
exec root, socket, pidfile and config file; the house's two are never touched)."""

from __future__ import annotations

import contextlib
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
from sprawl_orch.engines.docker_daemon import KIND, daemon_key, recall

RUNSC_ARGS = ["--network=none", "--oci-seccomp"]


def _write_config(conf: Path, args: list[str] | None, default: str | None = None) -> None:
    runsc = shutil.which("runsc") or "/usr/bin/runsc"
    made = conf.with_suffix(".new")
    held: dict[str, Any] = {}
    if args is not None:
        held["runtimes"] = {"runsc": {"path": runsc, "runtimeArgs": args}}
    if default is not None:
        held["default-runtime"] = default
    made.write_text(json.dumps(held))
    made.replace(conf)  # as an editor saves it: a new file under the same name


def _fresh_info(host: str) -> dict[str, Any]:
    import docker

    api = docker.APIClient(base_url=host, version="auto", timeout=60)
    try:
        return dict(api.info())
    finally:
        api.close()


class Daemon:
    def __init__(self, place: Path, relative: bool = False, before: tuple[str, ...] = ()) -> None:
        if shutil.which("dockerd") is None:
            pytest.fail("dockerd is not installed (.ci/setup-engines installs it)")
        self.conf = place / "daemon.json"
        self.sock = place / "d.sock"
        self.host = f"unix://{self.sock}"
        _write_config(self.conf, None if relative else RUNSC_ARGS)
        self.relative = relative
        self.log = (place / "d.log").open("w")
        self.proc = subprocess.Popen(
            ["dockerd", *before, "--host", self.host, "--data-root", str(place / "root"),
             "--exec-root", str(place / "x"), "--pidfile", str(place / "d.pid"),
             "--iptables=false", "--bridge=none",
             "--config-file", self.conf.name if relative and not before else str(self.conf)],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, cwd=place,
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

    def default_runtime(self) -> str:
        return str(_fresh_info(self.host)["DefaultRuntime"])

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


@contextlib.contextmanager
def _started(relative: bool, decoy: bool = False) -> Iterator[Daemon]:
    served_memo.take(KIND)
    # short: the socket's path and containerd's under the exec root are at most 107 bytes
    with tempfile.TemporaryDirectory(prefix="ad-", dir="/var/tmp") as made:
        before: tuple[str, ...] = ()
        if decoy:  # a --config-file the daemon does not read: the last one given wins
            (Path(made) / "decoy.json").write_text("{}")
            before = ("--config-file", str(Path(made) / "decoy.json"))
        started = Daemon(Path(made), relative=relative or decoy, before=before)
        try:
            yield started
        finally:
            started.stop()
            served_memo.take(KIND)


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    with _started(relative=False) as started:
        yield started


@pytest.fixture
def decoy_daemon() -> Iterator[Daemon]:
    """Started as `dockerd --config-file decoy.json ... --config-file daemon.json`."""
    with _started(relative=False, decoy=True) as started:
        yield started


@pytest.fixture
def relative_daemon() -> Iterator[Daemon]:
    """Started as `dockerd --config-file daemon.json` in its own directory."""
    with _started(relative=True) as started:
        yield started


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
    """What held: a daemon that loaded the file its key stamps is answered from memory."""
    engine = DockerEngine(environ={**os.environ, "DOCKER_HOST": daemon.host})
    try:
        facts = engine.identity()["facts"]
    finally:
        engine.close()
    kept = recall(daemon_key(daemon.host))
    assert kept is not None and kept[1]["Runtimes"]["runsc"]["runtimeArgs"] == RUNSC_ARGS
    assert facts["default_runtime"] == "runc"


def test_a_relative_config_file_is_the_daemon_s(relative_daemon: Daemon) -> None:
    """`dockerd --config-file daemon.json` reads it from its own working directory (or
    root: a dockerd in another mount namespace); the stamp of a file of that name seen
    from here (none, in this test's cwd) is not its file's."""
    assert not Path("daemon.json").exists()
    _becomes_gvisor_by_default(relative_daemon)


def test_the_last_config_file_flag_is_the_daemon_s(decoy_daemon: Daemon) -> None:
    """dockerd's flags (pflag) take the last of a repeated --config-file."""
    _becomes_gvisor_by_default(decoy_daemon)


def _becomes_gvisor_by_default(daemon: Daemon) -> None:
    environ = {**os.environ, "DOCKER_HOST": daemon.host}
    assert DockerEngine(environ=environ).identity()["facts"]["default_runtime"] == "runc"
    # the daemon's own file now makes gVisor the default runtime, and it reloads it
    _write_config(daemon.conf, RUNSC_ARGS, default="runsc")
    os.kill(daemon.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 120
    while daemon.default_runtime() != "runsc":
        assert time.monotonic() < deadline, "the test's dockerd did not reload in 120 s"
        time.sleep(0.5)
    after = DockerEngine(environ=environ)
    try:
        # every container it runs now runs under runsc: an admission saying runc is false
        assert after.identity()["facts"]["default_runtime"] == "runsc"
    finally:
        after.close()
