"""Attacks through a secret's source: a value the command can read without the proxy — a
variable every command's environment gets anyway (the floor: PATH, LANG, LC_ALL, TZ), a file
in the tree the commands run in a copy of (the copy carries it inside), or a file reached
through a link in the tree (the command retargets the link: the next tool reads and sends to
the bound host whatever file of the person's the command chose)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode, SprawlError

VALUE = "ghp_atk_config_" + "5" * 20


@pytest.mark.parametrize("source", ["LANG", "LC_ALL", "TZ", "PATH"])
def test_a_source_every_command_gets_is_refused(source: str) -> None:
    """`env = "TZ"`: the command's $TZ is the caller's, i.e. the value, in plain."""
    with pytest.raises(SprawlError) as caught:
        parse_config(
            {
                "sandbox": {
                    "network": {"allow": ["api.example.org"]},
                    "secrets": {"GH_PAT": {"hosts": ["api.example.org"], "env": source}},
                }
            }
        )
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert source in caught.value.detail


def _tool_with_file(tmp_path: Path, file: Path) -> None:
    config = parse_config(
        {
            "sandbox": {
                "arm": "native",
                "network": {"allow": ["api.example.org"]},
                "secrets": {"GH_PAT": {"hosts": ["api.example.org"], "file": str(file)}},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    with ExecTool(config, tmp_path / "work", environ={"PATH": "/usr/bin:/bin"}):
        pass


@pytest.mark.parametrize("shape", ["in the tree", "link in the tree", "tree is a link"])
def test_a_file_the_command_can_reach_is_refused(tmp_path: Path, shape: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "home-token"
    outside.write_text(VALUE)
    if shape == "in the tree":
        file = work / ".secrets" / "gh"
        file.parent.mkdir()
        file.write_text(VALUE)
    elif shape == "link in the tree":
        file = work / "token-link"
        file.symlink_to(outside)
    else:
        real = tmp_path / "elsewhere"
        real.mkdir()
        (real / "gh").write_text(VALUE)
        (work / "sub").symlink_to(real)
        file = work / "sub" / "gh"
    with pytest.raises(SprawlError) as caught:
        _tool_with_file(tmp_path, file)
    err = caught.value
    assert err.code is ErrorCode.CONFIG_INVALID
    assert "[sandbox.secrets.GH_PAT] file" in err.detail
    assert VALUE not in f"{err} {err.detail} {err.recovery}"


def test_a_file_outside_the_tree_is_read(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    token = tmp_path / "token"
    token.write_text(VALUE + "\n")
    _tool_with_file(tmp_path, token)  # no refusal


def test_a_host_without_a_port_binds_443_only() -> None:
    """docs/secrets.md: "a secret host without a port means 443". The allow-list entry without
    a port allows every port, so `CONNECT api.example.org:8443` (another service on that
    host: a staging server, a user's app) was intercepted and handed the value."""
    from sprawl_orch.secrets.plan import specs_of
    from sprawl_orch.secrets.run import SecretRun

    config = parse_config(
        {
            "sandbox": {
                "network": {"allow": ["api.example.org", "[::1]"]},
                "secrets": {"GH_PAT": {"hosts": ["api.example.org", "::1"]}},
            }
        }
    )
    run = SecretRun(specs_of(config.sandbox, {"GH_PAT": VALUE}))
    assert run.wants("api.example.org", 443) and run.wants("::1", 443)
    for port in (80, 8443, 22):
        assert not run.wants("api.example.org", port), port
        assert not run.wants("::1", port), port


def test_a_file_that_is_not_utf8_is_refused_with_a_code_never_quoting_it(tmp_path: Path) -> None:
    """A latin-1 password file: read_text raised UnicodeDecodeError, not E_CONFIG_INVALID, and
    that exception carries the whole file (its `object`, its args) to whatever prints it."""
    (tmp_path / "work").mkdir()
    token = tmp_path / "token"
    token.write_bytes(VALUE.encode() + b"\xe9t\xe9")
    with pytest.raises(SprawlError) as caught:
        _tool_with_file(tmp_path, token)
    err = caught.value
    assert err.code is ErrorCode.CONFIG_INVALID
    assert "[sandbox.secrets.GH_PAT] file" in err.detail
    seen = f"{err!r} {err.detail} {err.recovery} {err.args!r} {err.__context__!r}"
    assert VALUE not in seen and err.__cause__ is None


_READER = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from sprawl_orch.core.errors import SprawlError
from tests.secrets.test_attacks_config import _tool_with_file
try:
    _tool_with_file(Path(sys.argv[1]), Path(sys.argv[2]))
    print("READ")
except SprawlError as err:
    print(err.code.value, err.detail)
"""


@pytest.mark.parametrize("shape", ["fifo", "dev-zero", "huge", "directory"])
def test_a_file_that_never_ends_or_is_no_file_is_refused_at_once(
    tmp_path: Path, shape: str
) -> None:
    """`file` read whole with read_bytes: a FIFO with no writer blocked the tool's start for
    ever, /dev/zero (or a link to it) ate memory until the process died, a 1 MiB file was
    taken as a value no request head can carry. The caller's own config, but the tool's start
    must end, with a refusal naming the key. Run in a child with a 1 GiB address-space cap
    and a deadline."""
    (tmp_path / "work").mkdir()
    file = tmp_path / "token"
    if shape == "fifo":
        os.mkfifo(file)
    elif shape == "dev-zero":
        file.symlink_to("/dev/zero")
    elif shape == "huge":
        file.write_bytes(b"a" * (1 << 20))  # a header can't carry it (HEAD_LIMIT, 64 KiB)
    else:
        file.mkdir()
    repo = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            [sys.executable, "-c", _READER, str(tmp_path), str(file)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=repo,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the tool's start did not end within 60 s on a {shape}")
    assert done.stdout.startswith("E_CONFIG_INVALID"), (done.stdout, done.stderr[-2000:])
    assert "[sandbox.secrets.GH_PAT] file" in done.stdout
