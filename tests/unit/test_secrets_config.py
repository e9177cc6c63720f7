"""[sandbox.secrets.NAME] refused with E_CONFIG_INVALID naming what is wrong, and never quoting
a secret's table (the value may be in it); a value missing from the caller's environment
refuses the tool at its start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode, SprawlError

PLANTED = "ghp_planted_in_the_config_0123456789"


def _config(secret: dict[str, Any], **sandbox: Any) -> None:
    parse_config(
        {
            "sandbox": {
                "network": {"allow": ["api.example.org", "git.example.org:8443"]},
                "secrets": {"GH_PAT": secret},
                **sandbox,
            }
        }
    )


@pytest.mark.parametrize(
    ("secret", "sandbox", "words"),
    [
        ({"hosts": []}, {}, "no hosts"),
        ({}, {}, "no hosts"),
        ({"hosts": ["other.example.org"]}, {}, "other.example.org:443 not in the allow list"),
        ({"hosts": ["git.example.org"]}, {}, "git.example.org:443 not in the allow list"),
        ({"hosts": ["*.example.org"]}, {}, "not a wildcard"),
        ({"hosts": ["https://api.example.org"]}, {}, "api.example.org"),
        ({"hosts": ["api.example.org"], "value": PLANTED}, {}, "never"),
        ({"hosts": ["api.example.org"], "token": PLANTED}, {}, "caller's environment"),
        ({"hosts": ["api.example.org"]}, {"env_passthrough": ["GH_PAT"]}, "credential"),
        ({"hosts": ["api.example.org"]}, {"credentials": ["GH_PAT"]}, "in plain"),
        ({"hosts": ["api.example.org"], "env": "REAL"}, {"credentials": ["REAL"]}, "in plain"),
        ({"hosts": ["api.example.org"], "header": "Bad Header"}, {}, "header name"),
        ({"hosts": ["api.example.org"], "format": "Bearer"}, {}, "{value}"),
        ({"hosts": ["api.example.org"], "format": "{value} {x}"}, {}, "no other braces"),
        ({"hosts": ["api.example.org"], "header": "X", "basic_user": "u"}, {}, "choose one"),
        ({"hosts": ["api.example.org"], "env": "A", "file": "/x"}, {}, "one place"),
        ({"hosts": ["api.example.org"], "hosts2": 1}, {}, "unknown key"),
    ],
)
def test_bad_tables_are_refused(
    secret: dict[str, Any], sandbox: dict[str, Any], words: str
) -> None:
    with pytest.raises(SprawlError) as caught:
        _config(secret, **sandbox)
    err = caught.value
    assert err.code is ErrorCode.CONFIG_INVALID
    text = f"{err} {err.detail} {err.recovery} {err.to_dict() if hasattr(err, 'to_dict') else ''}"
    assert words in text, text
    assert "GH_PAT" in text
    assert PLANTED not in text


@pytest.mark.parametrize("name", ["HTTPS_PROXY", "SSL_CERT_FILE", "HOME"])
def test_a_name_sprawl_orch_sets_itself_is_refused(name: str) -> None:
    with pytest.raises(SprawlError) as caught:
        parse_config(
            {
                "sandbox": {
                    "network": {"allow": ["api.example.org"]},
                    "secrets": {name: {"hosts": ["api.example.org"]}},
                }
            }
        )
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "sets this variable itself" in caught.value.detail


def test_a_good_table_parses() -> None:
    _config(
        {
            "hosts": ["api.example.org", "git.example.org:8443"],
            "header": "Authorization",
            "format": "Bearer {value}",
        }
    )


def test_a_missing_value_refuses_the_tool(tmp_path: Path) -> None:
    config = parse_config(
        {
            "sandbox": {
                "arm": "copied_tree",
                "network": {"allow": ["api.example.org"]},
                "secrets": {"GH_PAT": {"hosts": ["api.example.org"], "env": "NOT_SET_HERE"}},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    with pytest.raises(SprawlError) as caught:
        work = tmp_path / "work"
        work.mkdir()
        with ExecTool(config, work, environ={"PATH": "/usr/bin:/bin"}) as tool:
            tool.exec(["true"])
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "$NOT_SET_HERE is not set" in caught.value.detail


def test_a_secret_on_an_arm_without_the_proxy_is_refused(tmp_path: Path) -> None:
    """copied_tree has no network namespace: the secret is refused, never passed in plain."""
    config = parse_config(
        {
            "sandbox": {
                "arm": "copied_tree",
                "network": {"allow": ["api.example.org"]},
                "secrets": {"GH_PAT": {"hosts": ["api.example.org"]}},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    work = tmp_path / "work"
    work.mkdir()
    environ = {"PATH": "/usr/bin:/bin", "GH_PAT": PLANTED}
    with ExecTool(config, work, environ=environ) as tool:
        result = tool.exec(["sh", "-c", "echo $GH_PAT"])
    assert result.code is not None and result.code.value == "E_SANDBOX_DENIED"
    assert PLANTED not in repr(result.as_json_dict())


def test_a_process_holding_values_is_not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0) in a child (it is process-wide): PR_GET_DUMPABLE says 0."""
    import subprocess
    import sys

    code = (
        "import ctypes; from sprawl_orch.secrets.plan import not_dumpable; "
        "libc = ctypes.CDLL(None); print(libc.prctl(3, 0, 0, 0, 0), not_dumpable(), "
        "libc.prctl(3, 0, 0, 0, 0))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "True", "0"]
