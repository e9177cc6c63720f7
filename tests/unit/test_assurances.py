"""Statements are derived from the axes; no arm writes its own sentence."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sprawl_orch.core.arms import ASSURANCES, ArmName, container_assurances
from sprawl_orch.core.assurances import PHRASES, Assurances, Guarantee, Kept, statement


def test_assurances_have_five_required_fields() -> None:
    assert list(Assurances.model_fields) == [g.value for g in Guarantee]
    assert all(field.is_required() for field in Assurances.model_fields.values())
    with pytest.raises(ValidationError):
        Assurances(filesystem=Kept.YES, network=Kept.YES, process_tree=Kept.YES, user=Kept.NO)  # type: ignore[call-arg]


def test_every_arm_answers_every_axis() -> None:
    assert set(ASSURANCES) == set(ArmName)
    for assurances in ASSURANCES.values():
        assert set(assurances.axes()) == set(Guarantee)


@pytest.mark.parametrize("arm", list(ArmName))
def test_statement_is_derived_from_the_phrases(arm: ArmName) -> None:
    assurances = ASSURANCES[arm]
    text = statement(arm.value, assurances)
    assert text.startswith(f"Runs under {arm.value}: ")
    for axis, kept in assurances.axes().items():
        yes, no = PHRASES[axis]
        assert (yes if kept is Kept.YES else no) in text
        assert (no if kept is Kept.YES else yes) not in text


def test_table_of_spec_section_1() -> None:
    g = Guarantee
    assert ASSURANCES[ArmName.LINUX_NAMESPACES] == Assurances.of(
        g.FILESYSTEM, g.NETWORK, g.PROCESS_TREE
    )
    # No namespace to put the copy at the tree's path: a write by that path reaches the tree.
    assert ASSURANCES[ArmName.COPIED_TREE] == Assurances.none()
    assert ASSURANCES[ArmName.MACOS_SEATBELT] == Assurances.of(g.FILESYSTEM, g.NETWORK)
    assert ASSURANCES[ArmName.WINDOWS_JOB] == Assurances.of(*Guarantee)
    assert ASSURANCES[ArmName.HOST] == Assurances.none()
    assert ASSURANCES[ArmName.UNAVAILABLE] == Assurances.none()
    assert not container_assurances(uids_namespaced=False).kept(g.USER)
    assert container_assurances(uids_namespaced=True) == Assurances.of(*Guarantee)


def test_note_is_appended() -> None:
    text = statement("copied_tree", ASSURANCES[ArmName.COPIED_TREE], "Stepped down: x.")
    assert text.endswith(" Stepped down: x.")
