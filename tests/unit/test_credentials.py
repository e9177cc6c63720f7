"""Credentials never reach a sandbox by accident (issue #11 item 5): env_passthrough
refuses every credential-shaped name of the one table; `[sandbox] credentials` passes one
on purpose, and every result's statement names it (never its value)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.credentials import CREDENTIAL_TABLE, credential_pattern, passed_on_purpose
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config

# The names issue #11 found passed through, then a wider sample of real-world ones.
LEAKED_BEFORE = (
    "GH_PAT",
    "GPG_PASSPHRASE",
    "SSHPASS",
    "CI_JOB_JWT",
    "MYSQL_PWD",
    "DATABASE_URL",
    "KUBECONFIG",
)
MORE = (
    "GITHUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "PGPASSWORD",
    "PGPASSFILE",
    "NPM_CONFIG__AUTH",
    "SSH_AUTH_SOCK",
    "SENTRY_DSN",
    "SLACK_WEBHOOK_URL",
    "REDIS_URL",
    "MONGODB_URI",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "DOCKER_CONFIG",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "SMTP_PASS",
    "NETRC",
    "db_password",
    "ado_pat",
)
# Issue 30: names that grant access or run a program, accepted until then.
ISSUE_30 = (
    "KRB5CCNAME",
    "DOCKER_HOST",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "KRB5_KTNAME",
)
# attack3: the same kinds, still accepted after issue 30 (and a mixed-case spelling).
ATTACK3 = (
    "Docker_Host",
    "DOCKER_CERT_PATH",
    "CONTAINER_SSHKEY",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_VALUE_0",
    "GIT_CONFIG_GLOBAL",
    "VSCODE_GIT_IPC_HANDLE",
    "GNUPGHOME",
    "CLOUDSDK_CONFIG",
    "AZURE_CONFIG_DIR",
    "GH_CONFIG_DIR",
    "AWS_CONFIG_FILE",
    "BOTO_CONFIG",
    "RCLONE_CONFIG",
    "TF_CLI_CONFIG_FILE",
    "NPM_CONFIG_USERCONFIG",
    "PIP_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
)
# Everyday names that must stay passable.
HARMLESS = (
    "HOME",
    "PWD",
    "OLDPWD",
    "PYTHONPATH",
    "KEYBOARD",
    "LANG",
    "COMPASS_HOME",
    "BYPASS_CACHE",
    "PATCH_LEVEL",
    "CI",
    "TERM",
    "VIRTUAL_ENV",
    "CARGO_HOME",
    "LD_LIBRARY_PATH",  # the command's own: host-side programs never get it (attack3)
    "PIP_NO_CACHE_DIR",
)
SECRET = "s3cret-value-never-in-a-result"


@pytest.mark.parametrize("name", LEAKED_BEFORE + MORE + ISSUE_30 + ATTACK3)
def test_passthrough_refuses_credentials_and_says_how_to_mean_it(name: str) -> None:
    with pytest.raises(SprawlError) as err:
        parse_config({"sandbox": {"env_passthrough": ["HOME", name]}})
    refusal = err.value
    assert refusal.code.value == "E_CONFIG_INVALID"
    assert "[sandbox] env_passthrough" in refusal.subject
    assert name in refusal.detail and "looks like a credential" in refusal.detail
    assert f'[sandbox] credentials = ["{name}"]' in refusal.detail


@pytest.mark.parametrize("name", HARMLESS)
def test_everyday_names_pass(name: str) -> None:
    assert credential_pattern(name) is None
    config = parse_config({"sandbox": {"env_passthrough": [name]}})
    assert config.sandbox.env_passthrough == (name,)


def test_every_row_of_the_table_says_why_and_catches_its_example() -> None:
    assert len({p for p, _ in CREDENTIAL_TABLE}) == len(CREDENTIAL_TABLE)
    for pattern, why in CREDENTIAL_TABLE:
        assert why.strip(), pattern
        # a name built from the pattern itself matches it (no dead row)
        assert credential_pattern(pattern.replace("*", "X")) is not None, pattern


def test_credentials_key_refuses_non_names() -> None:
    with pytest.raises(SprawlError) as err:
        parse_config({"sandbox": {"credentials": ["GH PAT"]}})
    assert "[sandbox] credentials" in err.value.subject


def test_a_credential_named_on_purpose_is_passed_and_stated(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    config = make_config(tmp_path, arm="copied_tree", credentials=["GH_PAT", "UNSET_TOKEN"])
    environ = {"PATH": "/usr/bin:/bin", "GH_PAT": SECRET, "GITHUB_TOKEN": "not-named"}
    with ExecTool(config, tree, offerings=offerings, environ=environ) as tool:
        for where in ("sandbox", "host"):
            result = tool.exec(
                # the command line is recorded: it compares halves, never the whole value
                [
                    "sh",
                    "-c",
                    'test "${GH_PAT%-never-in-a-result}" = s3cret-value && test -z "$GITHUB_TOKEN"',
                ],
                where=where,  # type: ignore[arg-type]
            )
            assert result.exit_code == 0, result
            assert "GH_PAT" in result.env and "GITHUB_TOKEN" not in result.env
            assert "UNSET_TOKEN" not in result.env  # unset: not passed, not named
            assert result.confinement is not None
            said = result.confinement.statement
            assert passed_on_purpose(["GH_PAT"]) in said
            assert "UNSET_TOKEN" not in said
            assert SECRET not in json.dumps(result.as_json_dict())
    ledger = (tmp_path / "state").rglob("*.jsonl")
    assert all(SECRET not in p.read_text() for p in ledger)


def test_no_credentials_no_sentence(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(
        config, tree, offerings=offerings, environ={"PATH": "/usr/bin:/bin", "GH_PAT": SECRET}
    ) as tool:
        result = tool.exec(["sh", "-c", 'test -z "$GH_PAT"'])
    assert result.exit_code == 0
    assert result.confinement is not None
    assert "CREDENTIALS" not in result.confinement.statement
