"""Escape class **link races** (stop 33's last break): a host process flips an entry of the
person's tree (link_race.py's shapes) while sprawl-orch syncs it, and the secret the flip
points at must never reach the copy or a command's output.

Rows: the raw control (the host's own `cat` through the flipping entry does print the secret,
or the flip proves nothing); the API (`copy.sync` with the copy guard, first syncs and resyncs
alternating); the CLI (`sprawl-orch exec -- cat …`) on linux_namespaces, landlock and
copied_tree. On the code before copy/source.py: 1 920 of 50 546 API syncs and 5 of 162 CLI
commands leaked (the attacker's counts), and this harness's shapes all leaked through the
API. The counts are
SPRAWL_LINK_RACE_SYNCS / SPRAWL_LINK_RACE_COMMANDS; a race is a sample, the deterministic
cases are tests/unit/test_copy_races.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomlkit

from sprawl_orch.copy.sync import sync
from sprawl_orch.core.credential_places import copy_guard
from sprawl_orch.core.errors import SprawlError
from tests.escapes.link_race import ALLOWED_NAME, MODES, flipping, leaked, plant_secret
from tests.escapes.runner import config_data, landlock_data
from tests.integration.conftest import missing

SYNCS = int(os.environ.get("SPRAWL_LINK_RACE_SYNCS", "2000"))
COMMANDS = int(os.environ.get("SPRAWL_LINK_RACE_COMMANDS", "40"))
READ = {"link": "k", "swap": "k", "dirlink": f"k/{ALLOWED_NAME}", "dirswap": f"k/{ALLOWED_NAME}"}


@pytest.fixture
def secret() -> Iterator[tuple[Path, str]]:
    where, token = plant_secret(Path.home())
    yield where, token
    shutil.rmtree(where)


@pytest.mark.parametrize("mode", MODES)
def test_control_the_flip_shows_the_secret_to_a_plain_reader(
    mode: str, secret: tuple[Path, str], tmp_path: Path
) -> None:
    secret_dir, token = secret
    tree = tmp_path / "tree"
    seen, reads = False, 0
    with flipping(tree, mode, secret_dir):
        # Until the first sight, within a minute: on a loaded machine the flipper may get
        # few time slices (a count of reads alone failed once at 2 000).
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            reads += 1
            try:
                seen = token in (tree / READ[mode]).read_text()
            except OSError:
                continue  # between two shapes
    assert seen, f"{mode}: {reads} reads through the flipping entry never met the secret"


@pytest.mark.parametrize("mode", MODES)
def test_api_syncs_never_copy_the_secret(
    mode: str, secret: tuple[Path, str], tmp_path: Path
) -> None:
    secret_dir, token = secret
    tree, copy = tmp_path / "tree", tmp_path / "copy"
    guard = copy_guard(str(Path.home()), (tmp_path / "state",))
    leaks: list[tuple[int, list[str]]] = []
    refused = 0
    with flipping(tree, mode, secret_dir):
        for i in range(SYNCS):
            try:
                sync(tree, copy, guard=guard, record=tmp_path / "record" if i % 2 else None)
            except SprawlError:
                refused += 1  # a failed sync deletes its copy: nothing to leak
                continue
            found = leaked(copy, token)
            if found:
                leaks.append((i, found))
    print(f"{mode}: {len(leaks)} of {SYNCS} syncs leaked, {refused} refused")
    assert leaks == [], f"{mode}: {len(leaks)} of {SYNCS} syncs copied the secret: {leaks[:5]}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arm", ["linux_namespaces", "landlock", "copied_tree"])
def test_cli_commands_never_print_the_secret(
    arm: str, mode: str, secret: tuple[Path, str], tmp_path: Path
) -> None:
    if arm == "linux_namespaces" and shutil.which("bwrap") is None:
        missing("bwrap is not installed (apt-get install -y bubblewrap)")
    secret_dir, token = secret
    tree = tmp_path / "tree"
    with tempfile.TemporaryDirectory(prefix="sprawl-race-") as outside:
        scratch, state = Path(outside) / "scratch", Path(outside) / "state"
        if arm == "landlock":
            data = landlock_data(scratch, state)
        else:
            data = config_data("native" if arm == "linux_namespaces" else arm, scratch, state)
        config = Path(outside) / "sprawl.toml"
        config.write_text(tomlkit.dumps(data))
        cli = Path(sys.executable).with_name("sprawl-orch")
        argv = [str(cli), "exec", "--json", "--config", str(config), "-C", str(tree)]
        leaks, ran = [], 0
        with flipping(tree, mode, secret_dir):
            for i in range(COMMANDS):
                done = subprocess.run(
                    [*argv, "--", "cat", READ[mode]],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                try:
                    said = json.loads(done.stdout)
                except ValueError:
                    pytest.fail(
                        f"command {i}: no JSON result (exit {done.returncode}): "
                        f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
                    )
                if said.get("arm") not in (None, arm):
                    missing(f"the {arm} arm is not offered here: it ran on {said['arm']}")
                ran += said.get("outcome") == "settled"
                if token in done.stdout or token in done.stderr:
                    leaks.append(i)
    print(f"{arm} {mode}: {len(leaks)} of {COMMANDS} commands printed the secret ({ran} ran)")
    assert ran, f"no command ran on {arm}: the row proves nothing"
    assert leaks == [], f"{arm} {mode}: commands {leaks} printed the secret"
