"""The CLI behaves like `docker run` (issue #13): options end at the program, output is the
command's byte for byte, every subcommand finds the config the same way (-C, --config) and
refuses the same way (125, the code on stderr), and one result schema covers every surface.

The CLI runs as a real process here (byte-exact streams need real pipes); the arm is the
copied tree so no engine is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sprawl_orch.runs.results import ExecResult

CLI = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_text("one\nx\nthree\n")
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    return tree


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "SPRAWL_STATE_DIR"}
    return subprocess.run(
        [*CLI, *args], capture_output=True, cwd=cwd, env=env, timeout=120, check=False
    )


# -- options end at the program ---------------------------------------------------------
def test_help_after_the_program_is_the_programs(workdir: Path) -> None:
    done = cli("exec", "-C", str(workdir), "ls", "--help")
    assert done.returncode == 0
    assert b"Run ARGV confined" not in done.stdout  # not sprawl-orch's help
    assert b"--all" in done.stdout  # ls's own


def test_a_programs_own_dash_c_is_not_ours(workdir: Path) -> None:
    done = cli("exec", "-C", str(workdir), "grep", "-C", "1", "x", "f")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"one\nx\nthree\n"


def test_our_option_after_the_program_goes_to_the_program(workdir: Path) -> None:
    done = cli("exec", "-C", str(workdir), "printf", "%s|", "--timeout", "5")
    assert (done.returncode, done.stdout) == (0, b"--timeout|5|")
    done = cli("exec", "-C", str(workdir), "sh", "-c", "echo x", "--timeout", "5")
    assert (done.returncode, done.stdout) == (0, b"x\n")


# -- output is the command's -------------------------------------------------------------
def test_binary_output_is_copied_byte_for_byte_past_the_cap(workdir: Path) -> None:
    blob = bytes(range(256)) * 1200 + b"\xff\xfe no newline"  # 300 KiB, not UTF-8
    (workdir / "image.png").write_bytes(blob)
    done = cli("exec", "-C", str(workdir), "--", "cat", "image.png")
    assert done.returncode == 0
    assert done.stdout == blob
    assert b"cut at" not in done.stdout and b"cut at" not in done.stderr
    # The statement comes after the command's own stderr, on stderr.
    done = cli("exec", "-C", str(workdir), "--", "sh", "-c", "printf 'e\\377' >&2")
    assert done.stderr.startswith(b"e\xff")
    assert b"sprawl-orch: Runs under copied_tree" in done.stderr


def test_json_keeps_the_cap_and_its_way_back(workdir: Path) -> None:
    (workdir / "big").write_bytes(b"a" * 100_000)
    done = cli("exec", "-C", str(workdir), "--json", "--", "cat", "big")
    data = json.loads(done.stdout)
    assert data["stdout_full"] and Path(data["stdout_full"]).read_bytes() == b"a" * 100_000
    assert "cut at 65536 of 100000 bytes" in data["stdout"]


# -- one way to find the config; one way to refuse ----------------------------------------
SUBCOMMANDS = [
    ("exec", "--", "true"),
    ("doctor",),
    ("view", "--shells"),
    ("serve",),
    ("mcp",),
    ("image", "verify"),
    ("copies", "list"),
    ("apply", "x-1"),
]


@pytest.mark.parametrize("sub", SUBCOMMANDS, ids=lambda s: " ".join(s[:2]))
@pytest.mark.parametrize("how", ["-C", "--config"])
def test_every_subcommand_finds_the_config_and_refuses_a_latin1_one(
    tmp_path: Path, sub: tuple[str, ...], how: str
) -> None:
    bad = tmp_path / "d"
    bad.mkdir()
    (bad / "sprawl.toml").write_bytes('# caf\xe9\n[sandbox]\narm = "auto"\n'.encode("latin-1"))
    where = ["-C", str(bad)] if how == "-C" else ["--config", str(bad / "sprawl.toml")]
    if sub[0] == "exec":
        done = cli("exec", *where, "--", "true")
    elif sub[0] == "apply":
        done = cli("apply", *where, sub[1])
    else:
        done = cli(*sub, *where)
    assert done.returncode == 125, done.stderr
    err = done.stderr.decode()
    assert "Traceback" not in err
    assert "E_CONFIG_INVALID" in err and "not UTF-8" in err and "line 1, column 6" in err


def test_a_missing_dash_c_directory_is_a_usage_error_everywhere(tmp_path: Path) -> None:
    absent = str(tmp_path / "no")
    for sub in (("exec", "-C", absent, "true"), ("doctor", "-C", absent), ("serve", "-C", absent)):
        done = cli(*sub)
        assert done.returncode == 2 and b"is not a directory" in done.stderr


# -- one result shape ---------------------------------------------------------------------
def test_config_time_and_exec_time_refusals_have_the_same_keys(workdir: Path) -> None:
    refused_late = json.loads(cli("exec", "-C", str(workdir), "--json", "nosuchprog").stdout)
    (workdir / "sprawl.toml").write_text('[sandbox]\narm = "boat"\n')
    refused_early = json.loads(cli("exec", "-C", str(workdir), "--json", "true").stdout)
    for data, code in ((refused_late, "E_TOOL_UNAVAILABLE"), (refused_early, "E_CONFIG_INVALID")):
        assert set(data) == set(ExecResult.model_fields)
        assert data["outcome"] == "exceptional" and data["code"] == code
        assert "what" not in data
        ExecResult.model_validate(data)  # the printed schema's model accepts it


def test_the_schema_is_printable_and_is_serves(workdir: Path) -> None:
    from sprawl_orch.serve.wire import schema

    done = cli("exec", "--schema")
    printed = json.loads(done.stdout)
    assert done.returncode == 0 and set(printed["properties"]) == set(ExecResult.model_fields)
    assert "E_TOOL_UNAVAILABLE" in printed["$defs"]["ErrorCode"]["enum"]
    serve_defs = schema()["response"]["$defs"]
    assert serve_defs["ExecResult"]["properties"] == printed["properties"]
    assert set(serve_defs["Refusal"]["properties"]) == {"code", "subject", "detail", "recovery"}
