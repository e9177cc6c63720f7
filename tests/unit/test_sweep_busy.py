"""The guardian's sweep retries podman's shm race like the arm's own remove does.

CI on 2026-12-02 failed test_sigkill_during_a_long_command[podman]: the guardian's `podman rm`
said "unlinkat …/userdata/shm: device or resource busy" though the container was gone a moment
later. The retry is what the arm already did (engines/podman.py, RM_BUSY_RETRIES)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from sprawl_orch.engines import podman as podman_mod
from sprawl_orch.engines.podman import PodmanEngine
from sprawl_orch.engines.sweep import Sweep

BUSY = (
    "Error: removing container abc root filesystem: 1 error occurred:\n"
    "\t* unlinkat /var/lib/containers/storage/overlay-containers/abc/userdata/shm: "
    "device or resource busy\n"
)


class Scripted(Sweep):
    def __init__(self, answers: list[tuple[int, str]]) -> None:
        super().__init__(PodmanEngine.__new__(PodmanEngine))
        self.name = "podman"
        self.answers = answers
        self.calls: list[list[str]] = []

    def _cli(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        code, err = self.answers.pop(0)
        return subprocess.CompletedProcess(list(args), code, "", err)


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(podman_mod.RM_BUSY_RETRIES) >= 3, "the retry list the arm and the sweep share"
    monkeypatch.setattr(podman_mod, "RM_BUSY_RETRIES", (0.0, 0.0, 0.0))


def test_busy_then_removed_is_no_problem() -> None:
    sweep = Scripted([(1, BUSY), (0, "")])
    assert sweep.remove(["abc"]) == []
    assert sweep.calls == [["rm", "-f", "-t", "0", "-i", "abc"]] * 2


def test_busy_every_time_is_said() -> None:
    sweep = Scripted([(1, BUSY)] * 4)
    problems = sweep.remove(["abc"])
    assert any("device or resource busy" in p for p in problems)
    assert len(sweep.calls) == 4


def test_another_error_is_not_retried() -> None:
    sweep = Scripted([(125, "Error: something else\n")])
    assert sweep.remove(["abc"]) == ["Error: something else"]
    assert len(sweep.calls) == 1
