"""A secret's `file` where the command can read it. The working directory was refused
(test_attacks_config.py); the bwrap arm's read-only view (/etc, /opt, /usr, tool directories)
was not: `file = "/opt/app/token"` (world-readable, or a non-root caller's own 0600 file: the
command runs as that uid) was one `cat` away from the value, the placeholder beside it.
Containers see no host path but the copy and the bundle: the control rows."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.runs.results import ExecResult
from tests.integration.conftest import missing

VALUE = "ghp_viewfile_" + "Kd3" * 10


@pytest.fixture
def in_view() -> Iterator[Path]:
    """A directory under /opt (in every bwrap view: the system part), removed afterwards."""
    if not os.path.isdir("/opt") or os.geteuid() != 0:
        missing("needs /opt and root to place a file in the bwrap arm's system view")
    where = Path("/opt") / f"sprawl-secret-test-{secrets.token_hex(4)}"
    where.mkdir(mode=0o755)
    try:
        yield where
    finally:
        shutil.rmtree(where)


def _exec(tmp_path: Path, sandbox: dict[str, object], file: Path, look: list[Path]) -> ExecResult:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    config = parse_config(
        {
            "sandbox": {
                **sandbox,
                "scratch_dir": str(tmp_path / "scratch"),
                "network": {"allow": ["api.example.org"]},
                "secrets": {"GH_PAT": {"hosts": ["api.example.org"], "file": str(file)}},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    line = 'echo "ph=$GH_PAT"; ' + "; ".join(f"cat {p}; echo" for p in look)
    with ExecTool(config, tree, environ=dict(os.environ)) as tool:
        return tool.exec(["sh", "-c", line], window=120)


def _run(tmp_path: Path, sandbox: dict[str, object], file: Path, look: list[Path]) -> str:
    result = _exec(tmp_path, sandbox, file, look)
    out = result.stdout + result.stderr
    assert "ph=SPRAWL_PLACEHOLDER_GH_PAT_" in out, out  # the command did run
    return out


def _place(where: Path) -> tuple[Path, list[Path]]:
    """The value's file (0644: the root caller's command runs as a uid of its own), and every
    path it is seen at: as written, through a linked directory, the real path."""
    real = where / "real"
    real.mkdir()
    token = real / "token"
    token.write_text(VALUE + "\n")
    token.chmod(0o644)
    (where / "linked").symlink_to(real)
    return where / "linked" / "token", [where / "linked" / "token", token]


def test_a_secret_file_in_the_bwrap_view_is_not_readable_inside(
    tmp_path: Path, in_view: Path
) -> None:
    if shutil.which("bwrap") is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    file, look = _place(in_view)
    out = _run(tmp_path, {"arm": "native"}, file, look)
    assert VALUE not in out, out


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_containers_never_see_the_secret_file(
    tmp_path: Path, in_view: Path, request: pytest.FixtureRequest, engine: str
) -> None:
    image = str(request.getfixturevalue(f"{engine}_image"))
    file, look = _place(in_view)
    sandbox = {"arm": "container", "container": {"engine": engine, "images": {engine: image}}}
    out = _run(tmp_path, sandbox, file, look)
    assert VALUE not in out, out


def test_a_hard_linked_secret_file_is_refused_on_bwrap(tmp_path: Path, in_view: Path) -> None:
    """Its other name can be anywhere in the view: the file under the caller's home (private
    inside), a hard link to it under /opt (read-only bound) showed the value."""
    if shutil.which("bwrap") is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    home = tmp_path / "home"
    home.mkdir()
    token = home / "token"
    token.write_text(VALUE + "\n")
    token.chmod(0o644)
    os.link(token, in_view / "token")
    result = _exec(tmp_path, {"arm": "native"}, token, [in_view / "token"])
    assert result.code is ErrorCode.SANDBOX_DENIED, result.as_json_dict()
    assert "2 hard links" in (result.detail or "") and VALUE not in repr(result.as_json_dict())


def test_a_secret_file_the_command_cannot_reach_still_lets_the_command_run(
    tmp_path: Path, in_view: Path
) -> None:
    """A root caller's 0700 directory under /opt: its command (another uid) cannot pass it,
    and a mask there failed bwrap's setup (no listener, the command refused)."""
    if shutil.which("bwrap") is None:
        missing("bwrap is not installed (run .ci/setup-engines)")
    private = in_view / "private"
    private.mkdir(mode=0o700)
    token = private / "token"
    token.write_text(VALUE + "\n")
    token.chmod(0o600)
    result = _exec(tmp_path, {"arm": "native"}, token, [token])
    assert result.outcome != "exceptional", result.as_json_dict()
    assert "ph=SPRAWL_PLACEHOLDER_GH_PAT_" in result.stdout
    assert VALUE not in result.stdout + result.stderr
