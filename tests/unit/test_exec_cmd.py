"""`sprawl-orch exec` through click's CliRunner: exit status mirrors the command; refusals
are 125 with code, detail and what to do; --json prints the result object."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from sprawl_orch import ExecTool
from sprawl_orch.cli import main
from sprawl_orch.core.errors import ErrorCode, SprawlError


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    return tree


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_exit_status_and_output_mirror_the_command(workdir: Path) -> None:
    code, out, err = run(
        "exec",
        "-C",
        str(workdir),
        "--",
        "sh",
        "-c",
        "cat a.txt; echo oops >&2; echo x > a.txt; exit 7",
    )
    assert code == 7
    assert out == "a\n"
    assert "oops" in err
    assert "Runs under copied_tree:" in err  # the statement is always said
    assert (workdir / "a.txt").read_text() == "a\n"


def test_json_result(workdir: Path) -> None:
    code, out, _ = run("exec", "-C", str(workdir), "--json", "--", "ls")
    data = json.loads(out)
    assert code == 0
    assert data["outcome"] == "settled" and data["arm"] == "copied_tree"
    assert data["stdout"].split() == ["a.txt", "sprawl.toml"]
    # copied_tree keeps no axis: a write by the tree's absolute path reaches it.
    assert data["confinement"]["assurances"]["filesystem"] == "no"
    assert data["work"]["created"] == 2


def test_shell_line(workdir: Path) -> None:
    code, out, _ = run("exec", "-C", str(workdir), "--shell", "--", "echo $((6*7)) | tr 4 x")
    assert (code, out) == (0, "x2\n")


def test_missing_program_is_refused_with_125(workdir: Path) -> None:
    code, out, err = run("exec", "-C", str(workdir), "--", "no-such-program-here")
    assert code == 125 and out == ""
    assert "E_TOOL_UNAVAILABLE" in err and "use the shell arm" in err


def test_bad_config_is_refused_with_125(workdir: Path) -> None:
    (workdir / "sprawl.toml").write_text('[sandbox]\narm = "boat"\n')
    code, _, err = run("exec", "-C", str(workdir), "--", "true")
    assert code == 125
    assert "E_CONFIG_INVALID" in err and "[sandbox] arm" in err and "'copied_tree'" in err


def test_window_kill_is_124(workdir: Path) -> None:
    code, _, err = run("exec", "-C", str(workdir), "--timeout", "0.3", "--", "sleep", "30")
    assert code == 124
    assert "window of 0.3 s passed" in err


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "0", "3e6"])
def test_a_timeout_that_keeps_no_window_is_a_usage_error(workdir: Path, value: str) -> None:
    # nan passed FloatRange(min=0) (nan <= 0 is false) and the command ran with no window;
    # inf and 1e400 ended in E_INTERNAL (atkaction). Nothing runs: the marker stays absent.
    code, _, err = run("exec", "-C", str(workdir), "--timeout", value, "--", "touch", "ran")
    assert code == 2, err
    assert "--timeout" in err
    assert not (workdir / "ran").exists()


@pytest.mark.parametrize("window", [float("nan"), float("inf"), -1.0, 0.0, 3e6])
def test_the_library_refuses_a_window_that_is_not_one(workdir: Path, window: float) -> None:
    with ExecTool(workdir) as tool, pytest.raises(SprawlError) as refused:
        tool.exec(["touch", "ran"], window=window)
    assert refused.value.code is ErrorCode.BAD_REQUEST
    assert "finite number above 0" in refused.value.detail


def test_signal_is_128_plus_n(workdir: Path) -> None:
    code, _, _ = run("exec", "-C", str(workdir), "--", "sh", "-c", "kill -TERM $$")
    assert code == 128 + 15


def test_where_host_writes_in_place(workdir: Path) -> None:
    code, _, err = run(
        "exec", "-C", str(workdir), "--where", "host", "--", "sh", "-c", "echo host > h.txt"
    )
    assert code == 0
    assert (workdir / "h.txt").read_text() == "host\n"
    assert "Runs under host:" in err


def test_not_a_directory(tmp_path: Path) -> None:
    code, _, err = run("exec", "-C", str(tmp_path / "nope"), "--", "true")
    assert code == 2
    assert "nope" in err


def test_excludes_and_bounds_a_person_can_see_and_change(workdir: Path) -> None:
    (workdir / "big").mkdir()
    for i in range(30):
        (workdir / "big" / f"blob{i}").write_bytes(b"b" * 1000)
    toml = (workdir / "sprawl.toml").read_text()
    (workdir / "sprawl.toml").write_text(
        toml.replace("[state]", "[sandbox.copy]\nmax_files = 10\n[state]")
    )
    code, out, err = run("exec", "-C", str(workdir), "--", "ls")
    assert code == 125 and "E_COPY_BOUND" in err
    assert "10 reached" not in err and "11 reached" in err  # the count it reached
    assert "largest top-level entries: big 30 kB (30 files)" in err
    assert "[sandbox.copy] max_files = 10" in err
    assert "raise [sandbox.copy] max_files (now 10)" in err
    (workdir / "sprawl.toml").write_text(
        toml.replace("[state]", '[sandbox.copy]\nmax_files = 10\nexclude = ["big/"]\n[state]')
    )
    code, out, err = run("exec", "-C", str(workdir), "--", "ls")
    assert code == 0 and "big" not in out.split() and "a.txt" in out
    assert "left out of the copy ([sandbox.copy] exclude): big/" in err
    code, out, _ = run("exec", "-C", str(workdir), "--json", "--", "true")
    assert json.loads(out)["work"]["excluded"] == ["big/"]


def test_fifos_sockets_devices_and_dead_links_are_named_not_skipped_silently(
    workdir: Path,
) -> None:
    # Issue 27: a fifo in the tree was left out with `work.excluded == []` and nothing on stderr.
    os.mkfifo(workdir / "pipe")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(workdir / "sock"))
        (workdir / "dead").symlink_to("/nonexistent-sprawl-target")
        code, _, err = run("exec", "-C", str(workdir), "--", "ls")
        assert code == 0, err
        for name, why in (
            ("pipe", "a fifo (named pipe)"),
            ("sock", "a socket"),
            ("dead", "a symbolic link that leads nowhere"),
        ):
            assert f"sprawl-orch: not in the copy: {name}: {why}" in err, err
        code, out, _ = run("exec", "-C", str(workdir), "--json", "--", "ls")
    data = json.loads(out)
    assert sorted(s.split(":")[0] for s in data["work"]["skipped"]) == [
        "dead",
        "pipe",
        "sock",
    ]
    assert "a.txt" in data["stdout"].split() and "pipe" not in data["stdout"].split()
