"""The README's claims table is `claims_table()` (issue 27, item 18): generated from the arms'
own assurances, never copied from a doctor run on one machine.

    .venv/bin/python -m tests.unit.test_readme_claims --write    # rewrite the README's table
"""

from __future__ import annotations

import sys
from pathlib import Path

from sprawl_orch.core.arms import container_assurances, linux_namespaces_assurances
from sprawl_orch.selection.claims import ROWS, claims_table

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN, END = "<!-- claims:begin -->\n", "<!-- claims:end -->"


def _with_table(text: str) -> str:
    start = text.index(BEGIN) + len(BEGIN)
    return text[:start] + claims_table() + text[text.index(END, start) :]


def test_the_readme_table_is_the_generated_one() -> None:
    text = README.read_text()
    assert text == _with_table(text), (
        "the README's claims table drifted: run .venv/bin/python -m "
        "tests.unit.test_readme_claims --write"
    )


def test_the_rows_are_the_arms_own_answers() -> None:
    # Not a copy: each container/bwrap row is what those functions return.
    rows = {form: a for _, form, a in ROWS}
    assert container_assurances(uids_namespaced=True) in rows.values()
    assert linux_namespaces_assurances(own_principal=True) in rows.values()
    assert claims_table().count("\n") == len(ROWS) + 2


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    README.write_text(_with_table(README.read_text()))
