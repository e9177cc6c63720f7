"""A release a stranger can install (issue 29): `python -m build` makes an sdist and a wheel from
a clean copy of the sources; the wheel installs into a fresh venv (no editable install, no
repository on sys.path) and there `sprawl-orch --version` names pyproject's version and the
README's first command's exec runs and states its guarantees.

Real parts only: the real build frontend and backend, a real venv, the registry pip is
configured for (dependencies), and the arm `auto` picks on this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `python -m build` makes from the tracked files, checked for its contents."""
    tmp_path = tmp_path_factory.mktemp("release")
    # Build from a copy holding only the tracked files: what a clean clone has, not this
    # worktree's .venv, caches or build/ leftovers (which setuptools would otherwise reuse).
    src = tmp_path / "src"
    tracked = _run(["git", "ls-files", "-z"], ROOT).split("\0")
    for rel in filter(None, tracked):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist)], src)
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [f"sprawl_orch-{VERSION}-py3-none-any.whl"]
    assert [s.name for s in sdists] == [f"sprawl_orch-{VERSION}.tar.gz"]

    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"sprawl_orch-{VERSION}.dist-info/METADATA").decode()
    # The image recipes and the typing marker are data, not modules: lost unless package-data
    # names them, and an install without recipes cannot build an image.
    assert "sprawl_orch/py.typed" in names
    assert any(n.startswith("sprawl_orch/images/recipes/") for n in names)
    assert not any(n.startswith("tests/") for n in names)
    assert "Classifier: Typing :: Typed" in metadata
    assert f"Version: {VERSION}" in metadata
    return wheels[0]


def test_the_wheel_installs_in_a_fresh_venv_and_runs_readme_command_1(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / "bin"
    # No PYTHONPATH or a venv of ours leaks in: the installed wheel alone must be enough.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    pip = [str(bindir / "python"), "-m", "pip", "install", "-q", "--retries", "10"]
    _run([*pip, str(wheel)], tmp_path, env)
    _readme_command_1(bindir / "sprawl-orch", tmp_path, env)


def test_pipx_installs_the_wheel_as_a_command(wheel: Path, tmp_path: Path) -> None:
    # pipx's own homes under tmp_path: nothing of the machine's pipx (or ~/.local/bin) is used
    # or changed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        "PIPX_HOME": str(tmp_path / "pipx-home"),
        "PIPX_BIN_DIR": str(tmp_path / "pipx-bin"),
        "PIPX_MAN_DIR": str(tmp_path / "pipx-man"),
    }
    env["PATH"] = f"{tmp_path / 'pipx-bin'}{os.pathsep}{env.get('PATH', '')}"
    _run(
        [sys.executable, "-m", "pipx", "install", "--python", sys.executable, str(wheel)],
        tmp_path,
        env,
    )
    exe = tmp_path / "pipx-bin" / "sprawl-orch"
    assert exe.is_file(), sorted(p.name for p in (tmp_path / "pipx-bin").iterdir())
    _readme_command_1(exe, tmp_path, env)


def _readme_command_1(exe: Path, tmp_path: Path, env: dict[str, str]) -> None:
    out = _run([str(exe), "--version"], tmp_path, env)
    assert VERSION in out, out

    # README command 1's exec, from a directory that is not the repository: `-C docs` on a copy
    # of docs/, so the command's copy is made from the stranger's tree, not ours.
    docs = tmp_path / "work" / "docs"
    shutil.copytree(ROOT / "docs", docs)
    before = sorted(p.name for p in docs.iterdir())
    try:
        done = subprocess.run(
            [str(exe), "exec", "-C", "docs", "--", "sh", "-c",
             "echo hi > out.txt; ls"],
            cwd=docs.parent, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        # The exec server this install started would idle 300 s more, running code from a
        # venv the test is about to delete.
        subprocess.run([str(exe), "server", "stop"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    listing = done.stdout.split()
    assert "out.txt" in listing and "design.md" in listing, done.stdout
    # The statement follows on stderr and names the arm that ran it.
    assert "sprawl-orch: Runs " in done.stderr, done.stderr
    # The write landed in the copy only: the stranger's tree is as it was.
    assert sorted(p.name for p in docs.iterdir()) == before
