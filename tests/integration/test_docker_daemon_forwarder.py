"""A forwarder that names itself dockerd (its comm set by prctl, as any process may) is not
taken for the daemon behind it: it keeps its pid and start time while the daemon it
forwards to changes, so what the first daemon answered must not be kept for the second
(engines/docker_daemon.py). The house's two real dockerds behind a real forwarder."""

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

from sprawl_orch.core import served_memo
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.docker_daemon import KIND

# Each connection goes to the socket named in `target` at that moment; the argv carries a
# dockerd's --config-file (the house daemon's own: the runtimes both house daemons run).
FORWARDER = """
import ctypes, socket, sys, threading
ctypes.CDLL(None).prctl(15, b"dockerd", 0, 0, 0)  # PR_SET_NAME: the comm
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(16)
print("ready", flush=True)
def pipe(a, b):
    while data := a.recv(65536):
        b.sendall(data)
    b.shutdown(socket.SHUT_WR)
while True:
    conn, _ = server.accept()
    up = socket.socket(socket.AF_UNIX)
    up.connect(open(sys.argv[2]).read())
    threading.Thread(target=pipe, args=(conn, up), daemon=True).start()
    threading.Thread(target=pipe, args=(up, conn), daemon=True).start()
"""


@pytest.fixture
def place() -> Iterator[Path]:
    served_memo.take(KIND)
    with tempfile.TemporaryDirectory(prefix="fw-", dir="/var/tmp") as made:
        yield Path(made)
    served_memo.take(KIND)


def test_a_forwarder_named_dockerd_gets_no_key(
    place: Path, docker_userns: tuple[dict[str, str], str]
) -> None:
    _forwarded(place, docker_userns, [sys.executable])


def test_a_forwarder_copied_as_dockerd_by_a_user_gets_no_key(
    place: Path, docker_userns: tuple[dict[str, str], str]
) -> None:
    """A program a user copied under the name dockerd (socat, python) is the user's file:
    a dockerd's executable is root's, as its package installed it."""
    copy = place / "dockerd"
    shutil.copy(os.path.realpath(sys.executable), copy)
    os.chown(copy, 65534, 65534)
    _forwarded(place, docker_userns, [str(copy)])


def _forwarded(place: Path, docker_userns: tuple[dict[str, str], str], program: list[str]) -> None:
    plain = os.environ["DOCKER_HOST"].removeprefix("unix://")
    remapped = docker_userns[0]["DOCKER_HOST"].removeprefix("unix://")
    config = f"{os.environ.get('SPRAWL_RUN_DIR', '/run/sprawl-orch')}/dockerd.json"
    sock, target = place / "f.sock", place / "target"
    target.write_text(plain)
    argv = [*program, "-c", FORWARDER, str(sock), str(target), "--config-file", config]
    libs = {**os.environ, "LD_LIBRARY_PATH": str(sysconfig.get_config_var("LIBDIR") or "")}
    forwarder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=libs)
    try:
        assert forwarder.stdout is not None and forwarder.stdout.readline() == "ready\n"
        environ = {**os.environ, "DOCKER_HOST": f"unix://{sock}"}
        first = DockerEngine(environ=environ)
        assert not first.identity()["facts"]["userns_remap"]
        first.close()
        target.write_text(remapped)  # the same forwarder, pid and start time: another daemon
        second = DockerEngine(environ=environ)
        try:
            # its containers' uids are remapped: the user axis of its result depends on it
            assert second.identity()["facts"]["userns_remap"]
        finally:
            second.close()
    finally:
        forwarder.kill()
        forwarder.wait(timeout=30)
        assert forwarder.stdout is not None
        forwarder.stdout.close()
