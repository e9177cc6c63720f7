"""Bounds on what a client can hand the servers and the kernel (issue 30 break 8): a serve
request line over --max-request-bytes is dropped unread with E_BAD_REQUEST naming the limit;
no response echoes a request back; an argument list the kernel would refuse with E2BIG is
E_BAD_REQUEST naming the numbers on every arm, not E_INTERNAL."""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sprawl_orch.core.arg_bounds import MAX_ARG_STRLEN, arg_max, check_arguments
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.serve.wire import bounded_lines, parse
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing
from tests.unit.conftest import make_config


def test_an_oversize_line_is_counted_and_dropped_not_held() -> None:
    stream = io.BytesIO(b'{"a":1}\n' + b"x" * 5000 + b"\n" + b"tail\n")
    got = list(bounded_lines(stream, 1024))
    assert got == ['{"a":1}\n', 5001, "tail\n"]


def test_a_bad_request_is_never_echoed() -> None:
    token = secrets.token_hex(16)
    bad = parse(json.dumps({"op": "exec", "id": 7, "command": {token: token}}))
    text = bad.model_dump_json()  # type: ignore[union-attr]
    assert "E_BAD_REQUEST" in text and token not in text


def test_serve_refuses_a_line_over_its_limit_naming_it(tmp_path: Path) -> None:
    token = secrets.token_hex(16)
    (tmp_path / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\n[state]\ndir = "{tmp_path / "state"}"\n'
    )
    line = json.dumps({"op": "exec", "id": 1, "command": ["echo", token * 100_000]})
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("sprawl-orch")),
            *("serve", "-C", str(tmp_path), "--max-request-bytes", "1048576"),
        ],
        input=line + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    response = json.loads(done.stdout.splitlines()[0])
    assert response["error"]["code"] == "E_BAD_REQUEST"
    assert "over the limit of 1048576 bytes" in response["error"]["detail"]
    assert token not in done.stdout and token not in done.stderr


def test_check_arguments_names_the_kernels_numbers() -> None:
    with pytest.raises(SprawlError) as one:
        check_arguments(["sh", "-c", "x" * MAX_ARG_STRLEN], {})
    assert "MAX_ARG_STRLEN" in one.value.detail and "argument 2" in one.value.detail
    many = ["y" * 100_000] * (arg_max() // 100_000 + 1)
    with pytest.raises(SprawlError) as total:
        check_arguments(["true", *many], {})
    assert "ARG_MAX" in total.value.detail
    check_arguments(["echo", "z" * 100_000], {"PATH": os.defpath})  # fits: no refusal


@pytest.mark.parametrize(
    ("arm", "where"),
    [("copied_tree", "sandbox"), ("copied_tree", "host"), ("native", "sandbox")],
)
def test_e2big_is_a_bad_request_not_internal(
    tmp_path: Path, tree: Path, arm: str, where: str
) -> None:
    if arm == "native" and shutil.which("bwrap") is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    config = make_config(tmp_path, arm=arm)
    with ExecTool(config, tree) as tool:
        shell = tool.exec("echo " + "w" * 50_000_000, shell=True, where=where)  # type: ignore[arg-type]
        listed = tool.exec(["true", *(["v" * 100_000] * 40)], where=where)  # type: ignore[arg-type]
    for result in (shell, listed):
        assert result.outcome == "exceptional" and result.code is not None
        assert result.code.value == "E_BAD_REQUEST", result.detail


@pytest.mark.parametrize(
    ("arm", "where"),
    [("copied_tree", "sandbox"), ("copied_tree", "host"), ("native", "sandbox")],
)
def test_one_environment_entry_over_the_kernels_bound_is_a_bad_request(
    tmp_path: Path, tree: Path, arm: str, where: str
) -> None:
    """attack3: only argv's strings were measured against MAX_ARG_STRLEN; a passed-through
    variable of 200 kB raised a bare OSError(E2BIG) from ionice out of ExecTool.exec."""
    if arm == "native" and shutil.which("bwrap") is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    token = secrets.token_hex(8)
    config = make_config(tmp_path, arm=arm, env_passthrough=["BIGVAR"])
    environ = {**os.environ, "BIGVAR": token * (MAX_ARG_STRLEN // 16 + 1)}
    with ExecTool(config, tree, environ=environ) as tool:
        result = tool.exec(["true"], where=where)  # type: ignore[arg-type]
    assert result.outcome == "exceptional" and result.code is not None
    assert result.code.value == "E_BAD_REQUEST", result.detail
    assert "BIGVAR" in result.detail and "MAX_ARG_STRLEN" in result.detail
    assert token not in result.detail


def test_serve_answers_a_deeply_nested_line_and_keeps_serving(tmp_path: Path) -> None:
    """attack3: '[' * 300000 -- 600 kB, inside the size bound -- raised RecursionError out
    of json.loads and took the whole server down; the next request was never answered."""
    work = tmp_path / "work"  # the state directory outside the tree (a refusal otherwise)
    work.mkdir()
    (work / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\n[state]\ndir = "{tmp_path / "state"}"\n'
    )
    nested = "[" * 300_000 + "]" * 300_000
    after = json.dumps({"op": "exec", "id": 2, "command": ["echo", "still-serving"]})
    done = subprocess.run(
        [str(Path(sys.executable).with_name("sprawl-orch")), "serve", "-C", str(work)],
        input=f"{nested}\n{after}\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, *rest = (json.loads(line) for line in done.stdout.splitlines())
    assert first["error"]["code"] == "E_BAD_REQUEST" and "nested" in first["error"]["detail"]
    assert any(r.get("id") == 2 and "still-serving" in json.dumps(r) for r in rest), rest
