"""The engines' words for an unreachable daemon, read the same by admission and images."""

from __future__ import annotations

import pytest

from sprawl_orch.engines.engine import daemon_refused, socket_denied
from sprawl_orch.engines.images import _looks_unreachable

REFUSED = [
    "Cannot connect to the Docker daemon at unix:///run/x.sock. Is the docker daemon running?",
    'Get "http://%2Frun%2Fx.sock/v1.41/info": dial unix /run/x.sock: connect: no such file '
    "or directory",
    "Cannot connect to Podman. Please verify your connection to the Linux system",
    "dial unix /var/run/docker.sock: connect: connection refused",
]
DENIED = [
    "Got permission denied while trying to connect to the Docker daemon socket at "
    "unix:///var/run/docker.sock"
]
NEITHER = [
    "Error: No such image: sprawl/busybox:nope",
    "Error: sprawl/busybox:nope: image not known",
    'exec: "nope": executable file not found in $PATH',
]


@pytest.mark.parametrize("words", REFUSED)
def test_refused_daemon_words(words: str) -> None:
    assert daemon_refused(words) and _looks_unreachable(words)


@pytest.mark.parametrize("words", DENIED)
def test_denied_socket_words(words: str) -> None:
    assert socket_denied(words) and _looks_unreachable(words)


@pytest.mark.parametrize("words", NEITHER)
def test_an_image_or_program_missing_is_not_an_unreachable_engine(words: str) -> None:
    assert not daemon_refused(words) and not socket_denied(words)
    assert not _looks_unreachable(words)
