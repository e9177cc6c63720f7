"""What a daemon answers is kept under the key of the daemon that answered, not under the key
an engine read when it was made: a re-admission (a command the engine failed) asks again,
and the path may reach another daemon by then (engines/docker_daemon.py). The house's two
real dockerds behind one symlink."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sprawl_orch.core import served_memo
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.docker_daemon import KIND


def test_a_re_admission_through_a_swapped_path_keeps_nothing_under_the_old_key(
    docker_userns: tuple[dict[str, str], str],
) -> None:
    plain = os.environ["DOCKER_HOST"].removeprefix("unix://")
    remapped = docker_userns[0]["DOCKER_HOST"].removeprefix("unix://")
    served_memo.take(KIND)
    with tempfile.TemporaryDirectory(prefix="rk-", dir="/var/tmp") as made:
        link = Path(made) / "docker.sock"
        environ = {**os.environ, "DOCKER_HOST": f"unix://{link}"}
        link.symlink_to(plain)
        engine = DockerEngine(environ=environ)
        try:
            assert not engine.identity()["facts"]["userns_remap"]
            # the path now reaches the remapping daemon; the engine's next connection does
            link.unlink()
            link.symlink_to(remapped)
            engine.api().close()  # its kept-alive connection gone (the daemon's idle timeout)
            assert engine.identity()["facts"]["userns_remap"]  # the re-admission: the truth
        finally:
            engine.close()
        link.unlink()
        link.symlink_to(plain)  # back to the plain daemon, the same process as at first
        again = DockerEngine(environ=environ)
        try:
            assert not again.identity()["facts"]["userns_remap"]
        finally:
            again.close()
            served_memo.take(KIND)


def test_a_closed_engine_made_again_forgets_what_it_was_told(
    docker_userns: tuple[dict[str, str], str],
) -> None:
    """An engine closed before its identity() was read, then used again after its path
    reaches another daemon, describes the daemon it reaches now (not the first one's
    /info, kept from its first client)."""
    plain = os.environ["DOCKER_HOST"].removeprefix("unix://")
    remapped = docker_userns[0]["DOCKER_HOST"].removeprefix("unix://")
    served_memo.take(KIND)
    with tempfile.TemporaryDirectory(prefix="rk-", dir="/var/tmp") as made:
        link = Path(made) / "docker.sock"
        environ = {**os.environ, "DOCKER_HOST": f"unix://{link}"}
        link.symlink_to(plain)
        first = DockerEngine(environ=environ)
        first.identity()  # the plain daemon's answers, kept
        first.close()
        engine = DockerEngine(environ=environ)
        try:
            engine.api()  # its client, from memory: nothing asked
            engine.close()
            link.unlink()
            link.symlink_to(remapped)
            assert engine.identity()["facts"]["userns_remap"]
        finally:
            engine.close()
            served_memo.take(KIND)
