"""A docker daemon reached over tcp:// (DOCKER_HOST=tcp://…, docker-in-docker's usual address),
on the real private dockerd behind a local TCP forwarder: every tcp address, live or dead,
failed with the SDK's "'APIClient' object has no attribute '_custom_adapter'" (one_pool asked
get_adapter, which reads an attribute only unix/ssh clients have)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.engines.docker import DockerEngine


def _pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:  # the other side closed: the pair ends
        pass
    finally:
        for s in (a, b):
            s.close()


@pytest.fixture
def tcp_docker() -> Iterator[str]:
    """tcp://127.0.0.1:PORT forwarded to the private dockerd's unix socket."""
    path = os.environ.get("DOCKER_HOST", "").removeprefix("unix://")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by the fixture: done
                return
            daemon = socket.socket(socket.AF_UNIX)
            daemon.connect(path)
            threading.Thread(target=_pipe, args=(client, daemon), daemon=True).start()
            threading.Thread(target=_pipe, args=(daemon, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"tcp://127.0.0.1:{port}"
    listener.close()


def test_a_tcp_docker_host_is_reached(tcp_docker: str) -> None:
    engine = DockerEngine(tcp_docker)
    assert engine.api().version()["ApiVersion"]


def test_a_dead_tcp_docker_host_says_the_connection_was_refused() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(SprawlError) as err:
        DockerEngine(f"tcp://127.0.0.1:{port}").api()
    assert "_custom_adapter" not in str(err.value)
    assert "Connection refused" in str(err.value), str(err.value)
