"""Offerings samples only what the asked arm can use: bwrap's user-namespace probe (a
process start) is skipped when the arm cannot be native, and for `auto` once an engine is
admitted -- `choose` never looks at it then."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.container import offer
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.engine_offer import EngineOffer
from sprawl_orch.native_fallbacks import bwrap
from sprawl_orch.selection.choice import choose
from sprawl_orch.selection.offerings import Offerings


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    called: list[str] = []

    def probe(path: str) -> tuple[bool, str]:
        called.append(path)
        return True, "probed"

    monkeypatch.setattr(bwrap, "user_namespace_works", probe)
    monkeypatch.setattr(shutil, "which", lambda name, path=None: f"/usr/bin/{name}")
    return called


def config(tmp_path: Path, arm: str) -> object:
    return parse_config({"sandbox": {"arm": arm, "scratch_dir": str(tmp_path)}})


def test_an_arm_that_cannot_be_native_skips_the_probe(tmp_path: Path, probes: list[str]) -> None:
    found = Offerings.this_machine(
        config(tmp_path, "copied_tree"),
        with_engines=False,  # type: ignore[arg-type]
        with_native=False,
    )
    assert probes == [] and found.user_namespace is None
    assert "not probed" in found.user_namespace_why
    assert choose("copied_tree", found).arm is ArmName.COPIED_TREE


def test_auto_probes_only_when_no_engine_was_admitted(
    tmp_path: Path,
    probes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admitted = EngineOffer("docker", True, "docker 20.10")
    monkeypatch.setattr(offer, "offer_engines", lambda *a, **k: (admitted,))
    found = Offerings.this_machine(config(tmp_path, "auto"), with_native=None)  # type: ignore[arg-type]
    assert probes == [] and choose("auto", found).arm is ArmName.CONTAINER
    refused = EngineOffer("docker", False, "cannot connect")
    monkeypatch.setattr(offer, "offer_engines", lambda *a, **k: (refused,))
    found = Offerings.this_machine(config(tmp_path, "auto"), with_native=None)  # type: ignore[arg-type]
    assert probes == ["/usr/bin/bwrap"] and found.user_namespace is True
    assert choose("auto", found).arm is ArmName.LINUX_NAMESPACES


def test_only_the_python_arm_examines_its_runtime(tmp_path: Path) -> None:
    """The python arm's runtime (two find_spec walks of sys.path, ~0.8 ms of a served call's
    fork) is looked at only when that arm is asked: `choose` reads it for no other."""
    from sprawl_orch.tool.exec_tool import ExecTool

    def examined(arm: str) -> str | None:
        state, tree = tmp_path / "state", tmp_path / "tree"
        tree.mkdir(exist_ok=True)
        conf = parse_config({"sandbox": {"arm": arm}, "state": {"dir": str(state)}})
        with ExecTool(conf, tree, record=False) as tool:
            return tool.offerings.python_missing

    assert examined("copied_tree") == "not examined"
    assert examined("python") != "not examined"  # None, or what is missing
