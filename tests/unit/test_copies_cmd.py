"""`sprawl-orch copies list|drop` through click's CliRunner, over a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sprawl_orch.cli import main
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.store import CopyStore, copy_key


def _workdir(tmp_path: Path, name: str) -> Path:
    work = tmp_path / name
    work.mkdir()
    (work / "sprawl.toml").write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
    (work / "data").write_bytes(b"x" * 2000)
    return work


def _keep(tmp_path: Path, work: Path) -> CopyStore:
    store = CopyStore(tmp_path / "state" / "copies", 10**9)
    lease = store.lease(work, copy_key(work, "{}"))
    lease.sync(work, Bounds(), Excludes())
    lease.release()
    return store


def test_list_and_drop(tmp_path: Path) -> None:
    one, two = _workdir(tmp_path, "one"), _workdir(tmp_path, "two")
    store = _keep(tmp_path, one)
    _keep(tmp_path, two)
    runner = CliRunner()
    listed = runner.invoke(main, ["copies", "list", "-C", str(one)])
    assert listed.exit_code == 0, listed.output
    assert "2 copies" in listed.output and str(one) in listed.output
    assert "idle since" in listed.output
    rows = [
        json.loads(line)
        for line in runner.invoke(
            main, ["copies", "list", "-C", str(one), "--json"]
        ).output.splitlines()
    ]
    assert {r["workdir"] for r in rows} == {str(one), str(two)}
    assert all(r["bytes"] == 2000 + len((one / "sprawl.toml").read_bytes()) for r in rows)
    assert all(Path(r["path"]).is_dir() and not r["busy"] for r in rows)

    here = runner.invoke(main, ["copies", "drop", "--here", "-C", str(one), "--json"])
    assert here.exit_code == 0, here.output
    assert json.loads(here.output)["dropped"] == [
        r["name"] for r in rows if r["workdir"] == str(one)
    ]
    assert [i.workdir for i in store.info()] == [str(two)]

    missing = runner.invoke(main, ["copies", "drop", "-C", str(one), "nope/0"])
    assert missing.exit_code == 2 and "no such copy" in missing.output

    held = store.lease(two, copy_key(two, "{}"))
    busy = runner.invoke(main, ["copies", "drop", "--all", "-C", str(one)])
    assert busy.exit_code == 1 and "in use" in busy.output
    held.release()
    done = runner.invoke(main, ["copies", "drop", "--all", "-C", str(one)])
    assert done.exit_code == 0 and "dropped" in done.output
    assert store.info() == []
    empty = runner.invoke(main, ["copies", "list", "-C", str(one)])
    assert "no copies kept" in empty.output


def test_drop_needs_a_choice(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["copies", "drop", "-C", str(tmp_path)])
    assert result.exit_code == 2 and "--all" in result.output


def test_progress_is_drawn_only_on_a_terminal_after_the_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from sprawl_orch.cli import copy_progress as cp
    from sprawl_orch.copy.sync import sync

    src = tmp_path / "src"
    src.mkdir()
    for i in range(2000):
        (src / f"f{i}").write_bytes(b"x")
    with cp.copy_progress(as_json=True) as progress:
        assert progress is None  # --json: never
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with cp.copy_progress(as_json=False) as progress:
        assert progress is None  # not a terminal: never

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    seen = Tty()
    monkeypatch.setattr(sys, "stderr", seen)
    monkeypatch.setattr(cp, "DELAY", 0.0)
    with cp.copy_progress(as_json=False) as progress:
        assert progress is not None
        calls: list[tuple[int, int, bool]] = []

        def spy(files: int, size: int, done: bool) -> None:
            calls.append((files, size, done))
            progress(files, size, done)

        sync(src, tmp_path / "copy", progress=spy)
    assert calls[-1] == (2000, 2000, True) and (512, 511, False) in calls
    assert "copying the working directory" in seen.getvalue()
    assert calls.count((2000, 2000, True)) == 1


@pytest.mark.parametrize("broken", ['arm = "nope"\n', "[sandbox\n"])
def test_drop_here_works_under_an_invalid_config(tmp_path: Path, broken: str) -> None:
    # Issue 27: it refused (E_CONFIG_INVALID) exactly when a person most wants to clean up.
    one, two = _workdir(tmp_path, "one"), _workdir(tmp_path, "two")
    store = _keep(tmp_path, one)
    _keep(tmp_path, two)
    toml = one / "sprawl.toml"
    toml.write_text(toml.read_text() + "[sandbox]\n" + broken)
    if broken.startswith("["):  # not TOML at all: the state directory is the default one
        home = tmp_path / "home"
        state = home / ".local" / "state" / "sprawl-orch"
        state.mkdir(parents=True)
        (state / "copies").symlink_to(tmp_path / "state" / "copies")
        env = {"HOME": str(home), "XDG_STATE_HOME": ""}
    else:
        env = {}
    runner = CliRunner()
    here = runner.invoke(main, ["copies", "drop", "--here", "-C", str(one)], env=env)
    assert here.exit_code == 0, here.output
    assert "the config is invalid (E_CONFIG_INVALID" in here.stderr
    assert f"dropping every copy of {one}" in here.stderr
    took = "the default state directory" if env else f"its [state] table ({toml})"
    assert took in here.stderr
    assert f"dropped {copy_key(one, '{}')}/0" in here.stdout
    assert [i.workdir for i in store.info()] == [str(two)]
    # Anything but --here still refuses: it would act on copies of other directories.
    every = runner.invoke(main, ["copies", "drop", "--all", "-C", str(one)], env=env)
    assert every.exit_code == 125 and "E_CONFIG_INVALID" in every.stderr
    assert [i.workdir for i in store.info()] == [str(two)]
