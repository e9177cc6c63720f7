"""Config parsing: every refusal is E_CONFIG_INVALID naming key, value and spellings."""

from __future__ import annotations

from pathlib import Path

import pytest

from sprawl_orch.config import Config, load_config, parse_config, with_warm
from sprawl_orch.core.credentials import credential_shaped
from sprawl_orch.core.errors import ErrorCode, SprawlError

HEX = "a" * 64

BAD: list[tuple[str, str, str]] = [
    # (toml text, key that must be named, a fragment the detail must contain)
    ('[sandbox]\narm = "boat"\n', "[sandbox] arm", "'copied_tree'"),
    ("[sandbox]\narm = 3\n", "[sandbox] arm", "accepted spellings"),
    ('[sandbox]\ninterpreter = "fish"\n', "[sandbox] interpreter", "'pwsh'"),
    ('[sandbox]\nshell = "yes please"\n', "[sandbox] shell", "yes please"),
    ('[sandbox]\nwrite_limit = "all"\n', "[sandbox] write_limit", "'create'"),
    ('[sandbox]\nenv_passthrough = ["GITHUB_TOKEN"]\n', "[sandbox] env_passthrough", "credential"),
    (
        '[sandbox]\nenv_passthrough = ["AWS_SECRET_ACCESS_KEY"]\n',
        "[sandbox] env_passthrough",
        "credential",
    ),
    ('[sandbox]\nenv_passthrough = ["MY_API_KEY"]\n', "[sandbox] env_passthrough", "credential"),
    (
        '[sandbox]\nenv_passthrough = ["NOT A NAME"]\n',
        "[sandbox] env_passthrough",
        "not an environment variable name",
    ),
    ('[sandbox]\ncolour = "red"\n', "[sandbox] colour", "unknown key"),
    ('[sandbx]\narm = "auto"\n', "sandbx", "unknown key"),
    (
        '[sandbox.container]\nimage = "busybox:latest"\n',
        "[sandbox.container] image",
        "a tag can move",
    ),
    ('[sandbox.container]\nimage = "sha256:abc"\n', "[sandbox.container] image", "sha256:<64 hex>"),
    ('[sandbox.container]\nengine = "lxc"\n', "[sandbox.container] engine", "'podman'"),
    ("[sandbox.container]\nmemory_bytes = 1000\n", "[sandbox.container] memory_bytes", "1000"),
    ("[sandbox.container]\ncpus = 0\n", "[sandbox.container] cpus", "greater than 0"),
    ("[sandbox.container]\npids = 2\n", "[sandbox.container] pids", "8"),
    ('[sandbox.container]\nuser = "root"\n', "[sandbox.container] user", "numeric uid"),
    ('[sandbox.container]\nulimits = {nofile = "lots"}\n', "[sandbox.container] ulimits", "nofile"),
    (
        '[sandbox.container.images]\ndocker = "latest"\n',
        "[sandbox.container.images] docker",
        "fixed image ID",
    ),
    ("[sandbox]\nwindow_seconds = -1\n", "[sandbox] window_seconds", "-1"),
    ("[sandbox]\nwindow_seconds = inf\n", "[sandbox] window_seconds", "inf"),
    ("[sandbox]\nwindow_seconds = nan\n", "[sandbox] window_seconds", "nan"),
    (
        '[sandbox.container]\ndocker_host = "/run/docker.sock"\n',
        "[sandbox.container] docker_host",
        "unix:///absolute/path",
    ),
    (
        '[sandbox.container]\ndocker_host = "unix://run/docker.sock"\n',
        "[sandbox.container] docker_host",
        "unix://run/docker.sock",
    ),
    (
        '[sandbox.container]\ndocker_host = "unix:///run/dir/"\n',
        "[sandbox.container] docker_host",
        "tcp://HOST:PORT",
    ),
    (
        '[sandbox.container]\ndocker_host = "http://localhost:2375"\n',
        "[sandbox.container] docker_host",
        "ssh://",
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment"), BAD)
def test_bad_config_is_refused_naming_key_and_value(
    tmp_path: Path, text: str, key: str, fragment: str
) -> None:
    path = tmp_path / "sprawl.toml"
    path.write_text(text)
    with pytest.raises(SprawlError) as caught:
        load_config(path)
    err = caught.value
    assert err.code is ErrorCode.CONFIG_INVALID
    assert err.subject == key
    assert key in err.detail and str(path) in err.detail
    assert fragment in err.detail
    assert err.recovery


@pytest.mark.parametrize(
    "text",
    [
        '[sandbox.container]\nimage = "busybox:latest"\n',
        '[sandbox.container.images]\ndocker = "busybox:latest"\n',
        '[sandbox.container]\nimages = {podman = "busybox:latest"}\n',
    ],
)
def test_a_tag_s_recovery_is_the_pin_not_a_default(tmp_path: Path, text: str) -> None:
    # Issue 27: it said "remove it to take the default" -- there is no default image.
    path = tmp_path / "sprawl.toml"
    path.write_text(text)
    with pytest.raises(SprawlError) as caught:
        load_config(path)
    recovery = caught.value.recovery
    assert "sprawl-orch image pin busybox:latest" in recovery
    assert "default" not in recovery


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sprawl.toml"
    path.write_text("[sandbox\narm=")
    with pytest.raises(SprawlError) as caught:
        load_config(path)
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert caught.value.subject == str(path)
    assert "TOML" in caught.value.detail


def test_unreadable_config_path(tmp_path: Path) -> None:
    with pytest.raises(SprawlError) as caught:
        load_config(tmp_path / "missing.toml")
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "cannot read" in caught.value.detail


def test_no_file_means_defaults(tmp_path: Path) -> None:
    config = load_config(cwd=tmp_path)
    assert config == Config()
    assert config.sandbox.arm == "auto"
    assert config.sandbox.container.image is None


def test_file_in_working_directory_is_found(tmp_path: Path) -> None:
    (tmp_path / "sprawl.toml").write_text('[sandbox]\narm = "copied_tree"\n')
    config = load_config(cwd=tmp_path)
    assert config.sandbox.arm == "copied_tree"
    assert config.source == tmp_path / "sprawl.toml"


def test_per_engine_pins_override_the_shared_image() -> None:
    shared, docker = "sha256:" + HEX, "sha256:" + "b" * 64
    config = parse_config(
        {"sandbox": {"container": {"image": shared, "images": {"docker": docker}}}}
    )
    assert config.sandbox.container.image_for("docker") == docker
    assert config.sandbox.container.image_for("podman") == shared


@pytest.mark.parametrize(
    ("name", "shaped"),
    [
        ("GITHUB_TOKEN", True),
        ("db_password", True),
        ("SSH_KEY", True),
        ("CREDENTIALS_FILE", True),
        ("HOME", False),
        ("PYTHONPATH", False),
        ("KEYBOARD", False),
        ("LANG", False),
    ],
)
def test_credential_shapes(name: str, shaped: bool) -> None:
    assert credential_shaped(name) is shaped


@pytest.mark.parametrize("user", ["0", "0:0", "00:1000"])
def test_warm_mode_refuses_a_command_as_the_inits_uid(user: str) -> None:
    # the idle init of a warm container is uid 0 (tests/escapes/test_warm.py: a command as
    # uid 0 left a file in /dev for the next one)
    with pytest.raises(SprawlError) as err:
        parse_config({"sandbox": {"container": {"user": user, "warm": True}}})
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert "uid 0" in err.value.detail
    plain = parse_config({"sandbox": {"container": {"user": user}}})
    with pytest.raises(SprawlError) as switched:
        with_warm(plain, True)
    assert switched.value.code is ErrorCode.CONFIG_INVALID
    assert with_warm(plain, False).sandbox.container.user == user
    assert with_warm(parse_config({}), True).sandbox.container.warm


@pytest.mark.parametrize(
    "host",
    ["unix:///run/sprawl-orch/docker-userns.sock", "tcp://127.0.0.1:2375", "ssh://me@build-host"],
)
def test_docker_host_takes_the_forms_of_docker_host(host: str) -> None:
    config = parse_config({"sandbox": {"container": {"docker_host": host}}})
    assert config.sandbox.container.docker_host == host
    assert parse_config({}).sandbox.container.docker_host is None
