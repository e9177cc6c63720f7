"""The README's "In another project's GitHub workflow" block is a workflow a stranger pastes: it
must lint clean (actionlint; zizmor --offline, which refuses an unpinned `uses:`), use only
inputs and outputs that action.yml declares, and pin checkout as this project's own workflows
do (so the snippet moves with the next pin update instead of rotting).

Its placeholders are filled the way its prose tells the reader to: OWNER an account, COMMIT the
full commit of a tag.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## In another project's GitHub workflow\n"
FENCE = re.compile(r"^```text\n(.*?)^```$", re.S | re.M)
# A commit as a reader would paste it: 40 hex digits (zizmor's hash-pin rule wants exactly that).
A_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _snippet() -> str:
    text = (ROOT / "README.md").read_text()
    assert HEADING in text, "the README lost its section on using the action in a workflow"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    found = FENCE.search(section)
    assert found, "the section has no ```text workflow block"
    return found.group(1)


def _declared(kind: str) -> set[str]:
    """The names under `inputs:` or `outputs:` in action.yml (two-space keys of that block)."""
    text = (ROOT / "action.yml").read_text()
    block = text.split(f"\n{kind}:\n", 1)[1]
    block = re.split(r"\n(?=\S)", block, maxsplit=1)[0]
    return set(re.findall(r"^  ([a-z][a-z-]*):", block, re.M))


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    # Both come with `.[test]` (pyproject): a missing one is a broken install, not a skip.
    assert exe.is_file(), (
        f"{name} is not installed beside {sys.executable}: pip install -e '.[test]'"
    )
    return str(exe)


def test_the_snippet_uses_only_declared_inputs_and_outputs() -> None:
    snippet = _snippet()
    uses = re.search(r"uses: OWNER/sprawl-orch@COMMIT # v(\S+)\n(.*?)\n {6}- ", snippet, re.S)
    assert uses, "the block must use OWNER/sprawl-orch@COMMIT # v<version>"
    given = set(re.findall(r"^ {10}([a-z][a-z-]*):", uses.group(2), re.M))
    assert given and given <= _declared("inputs"), given - _declared("inputs")
    read = set(re.findall(r"steps\.sprawl\.outputs\.([a-z-]+)", snippet))
    assert read and read <= _declared("outputs"), read - _declared("outputs")
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version and uses.group(1) == version.group(1), "the tag comment names another version"


def test_the_snippet_pins_checkout_as_the_projects_workflows_do() -> None:
    pin = re.compile(r"uses: (actions/checkout@[0-9a-f]{40} # v\S+)")
    ours = {
        m for f in (ROOT / ".github/workflows").glob("*.yml") for m in pin.findall(f.read_text())
    }
    theirs = set(pin.findall(_snippet()))
    assert len(ours) == 1 and theirs == ours, (ours, theirs)


@pytest.mark.parametrize("linter", ["actionlint", "zizmor"])
def test_the_snippet_lints_clean(linter: str, tmp_path: Path) -> None:
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    workflow = workflows / "tests.yml"
    workflow.write_text(_snippet().replace("OWNER", "someone").replace("COMMIT", A_COMMIT))
    argv = [_tool(linter), str(workflow)]
    if linter == "zizmor":
        argv[1:1] = ["--offline", "--no-progress"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
