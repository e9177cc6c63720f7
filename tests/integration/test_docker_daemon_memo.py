"""A docker client of a daemon process whose /version and /info were read before (in this
process, or by an earlier served call: served_memo) asks neither again, and a daemon swapped
behind the same socket path is asked anew (engines/docker_daemon.py). Real dockerds: the
house's own and its userns-remap one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.core import served_memo
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.docker_daemon import KIND


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The /version and /info requests any docker client of this process makes (the real
    calls, counted)."""
    import docker

    served_memo.take(KIND)  # what earlier tests of this process learned
    seen: list[str] = []
    for name in ("version", "info"):
        original = getattr(docker.APIClient, name)

        def spy(
            self: Any, *args: Any, _original: Any = original, _name: str = name, **kw: Any
        ) -> Any:
            seen.append(_name)
            return _original(self, *args, **kw)

        monkeypatch.setattr(docker.APIClient, name, spy)
    yield seen
    served_memo.take(KIND)


def test_a_second_client_of_the_same_daemon_asks_neither(
    docker_image: str, asked: list[str]
) -> None:
    first = DockerEngine()
    identity = first.identity()
    assert asked == ["version", "info"]
    asked.clear()
    second = DockerEngine()  # a served call's fork, or the arm after the offer's admission
    try:
        assert second.identity() == identity
        assert asked == []
        # the version it starts on is the negotiated one, and it works
        assert second.api().api_version == first.api().api_version
        assert second.local_image(docker_image) == docker_image
        # a re-admission (a command the engine failed) asks the daemon itself
        assert second.identity() == identity
        assert sorted(asked) == ["info", "version"]
    finally:
        first.close()
        second.close()


def test_another_daemon_behind_the_same_path_is_asked(
    docker_userns: tuple[dict[str, str], str], asked: list[str]
) -> None:
    with tempfile.TemporaryDirectory(prefix="sd-") as made:
        link = Path(made) / "docker.sock"
        environ = {**os.environ, "DOCKER_HOST": f"unix://{link}"}
        link.symlink_to(os.environ["DOCKER_HOST"].removeprefix("unix://"))
        plain = DockerEngine(environ=environ).identity()
        DockerEngine(environ=environ).identity()
        assert asked == ["version", "info"]  # the second client: from memory
        # the same endpoint now reaches a daemon started with --userns-remap
        link.unlink()
        link.symlink_to(docker_userns[0]["DOCKER_HOST"].removeprefix("unix://"))
        remapped = DockerEngine(environ=environ).identity()
    assert asked == ["version", "info", "version", "info"]
    # not the daemon ID: docker 20.10 derives it from /etc/docker/key.json, which both of
    # the house's dockerds read (the same ID), so it cannot key what a daemon answers
    assert remapped["facts"]["userns_remap"] and not plain["facts"]["userns_remap"]
    assert remapped["host"] == plain["host"]


def test_the_arm_made_from_an_offer_drives_the_offer_s_client(
    docker_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docker

    from sprawl_orch.config import parse_config
    from sprawl_orch.container.admission import clear_cache
    from sprawl_orch.container.arm import ContainerArm
    from sprawl_orch.container.offer import offer_engines

    made: list[object] = []
    original = docker.APIClient.__init__

    def counted(self: Any, *args: Any, **kw: Any) -> None:
        made.append(self)
        original(self, *args, **kw)

    monkeypatch.setattr(docker.APIClient, "__init__", counted)
    config = parse_config(
        {
            "sandbox": {
                "arm": "container",
                "container": {"engine": "docker", "images": {"docker": docker_image}},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    clear_cache()
    try:
        (offer,) = offer_engines(config)
        # the offer's admission: its client (and the probe container's attach client)
        assert offer.admitted and made
        before = list(made)
        arm = ContainerArm.from_offer(offer, config.sandbox.container)
        assert arm.engine.local_image(docker_image) == docker_image
        assert made == before  # the arm asked through the offer's client
        # a second arm of the same offer makes its own: no two arms close one client
        other = ContainerArm.from_offer(offer, config.sandbox.container)
        assert other.engine is not arm.engine
    finally:
        clear_cache()
