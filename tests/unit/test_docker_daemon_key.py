"""engines/docker_daemon.py: the key the daemon's /version and /info are kept under changes
with the listening process and its config file, and a listener that is not a dockerd gets
none (asked each call). The listener is a real process on a real unix socket."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.engines import docker_daemon

LISTENER = """
import ctypes, os, socket, sys
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME: the comm
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[2])
if sys.argv[3] == "rootless" and os.getuid() == 0:
    os.setuid(65534)  # SO_PEERCRED reports who called listen()
server.listen(8)
print("ready", flush=True)
sys.stdin.read()
"""


class Listener:
    def __init__(self, place: Path, name: str, as_root: bool = True) -> None:
        self.sock, self.conf = place / "d.sock", place / "daemon.json"
        self.sock.unlink(missing_ok=True)
        # a dockerd's executable is named dockerd: this python, copied under that name
        program = sys.executable
        if name == "dockerd":
            program = str(place / "dockerd")
            shutil.copy(os.path.realpath(sys.executable), program)
        argv = [program, "-c", LISTENER, name, str(self.sock)]
        argv += ["--config-file", str(self.conf)] if as_root else ["rootless"]
        # a python linked to its libpython finds it from the copy too
        libs = {**os.environ, "LD_LIBRARY_PATH": str(sysconfig.get_config_var("LIBDIR") or "")}
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=libs
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def place() -> Iterator[Path]:
    # short: a unix socket's path is at most 107 bytes
    with tempfile.TemporaryDirectory(prefix="sd-") as made:
        yield Path(made)


def test_the_key_follows_the_process_and_its_config_file(place: Path) -> None:
    daemon = Listener(place, "dockerd")
    try:
        (place / "daemon.json").write_text("{}")
        first = docker_daemon.daemon_key(daemon.host)
        assert first is not None and first[2] == daemon.proc.pid
        assert docker_daemon.daemon_key(daemon.host) == first
        docker_daemon.learn(first, {"ApiVersion": "1.41"}, {"ID": "a"})
        assert docker_daemon.recall(first) == ({"ApiVersion": "1.41"}, {"ID": "a"})
        # a SIGHUP reload reads the file again: another runtime must not be answered from memory
        (place / "daemon.json").write_text('{"default-runtime": "other"}')
        reloaded = docker_daemon.daemon_key(daemon.host)
        assert reloaded is not None and reloaded != first
        assert docker_daemon.recall(reloaded) is None
    finally:
        daemon.stop()
    assert docker_daemon.daemon_key(daemon.host) is None  # nobody listens
    again = Listener(place, "dockerd")  # a restarted daemon, same path and config
    try:
        restarted = docker_daemon.daemon_key(again.host)
        assert restarted is not None and restarted not in (first, reloaded)
        assert docker_daemon.recall(restarted) is None
    finally:
        again.stop()


def test_a_listener_that_is_not_dockerd_gets_no_key(place: Path) -> None:
    # socat, ssh or a proxy: the daemon behind it can change while it keeps its pid
    forwarder = Listener(place, "socat")
    try:
        assert docker_daemon.daemon_key(forwarder.host) is None
        assert docker_daemon.recall(None) is None
    finally:
        forwarder.stop()
    # a rootless dockerd without --config-file reads its own user's file: not keyed
    rootless = Listener(place, "dockerd", as_root=False)
    try:
        assert docker_daemon.daemon_key(rootless.host) is None
    finally:
        rootless.stop()
    for host in ("tcp://127.0.0.1:2375", "ssh://someone@somewhere", f"unix://{place}"):
        assert docker_daemon.daemon_key(host) is None, host
