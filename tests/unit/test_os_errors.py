"""errors.os_errors: the one OSError -> SprawlError translation at a boundary."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors


def test_an_os_error_leaves_as_sprawl_error_with_the_os_reason_and_its_cause(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nope"
    with (
        pytest.raises(SprawlError) as caught,
        os_errors(ErrorCode.STORAGE_FATAL, missing, "cannot read the ledger", "pass another file"),
    ):
        missing.read_bytes()
    err = caught.value
    assert (err.code, err.subject, err.recovery) == (
        ErrorCode.STORAGE_FATAL,
        str(missing),
        "pass another file",
    )
    assert err.detail == "cannot read the ledger: No such file or directory"
    assert isinstance(err.__cause__, FileNotFoundError)


def test_a_directory_reads_as_is_a_directory(tmp_path: Path) -> None:
    with (
        pytest.raises(SprawlError) as caught,
        os_errors(
            ErrorCode.CONFIG_INVALID, tmp_path, "cannot read the config file", "check --config"
        ),
    ):
        tmp_path.read_bytes()
    assert caught.value.detail == "cannot read the config file: is a directory"


def test_an_os_error_without_strerror_says_its_message() -> None:
    with (
        pytest.raises(SprawlError) as caught,
        os_errors(ErrorCode.STORAGE_FATAL, "x", "cannot", "fix"),
    ):
        raise OSError("torn write")
    assert caught.value.detail == "cannot: torn write"


def test_other_exceptions_and_sprawl_errors_pass_through_untouched() -> None:
    inner = SprawlError(ErrorCode.BAD_REQUEST, "s", "d", "r")
    with pytest.raises(SprawlError) as caught, os_errors(ErrorCode.STORAGE_FATAL, "x", "y", "z"):
        raise inner
    assert caught.value is inner
    with pytest.raises(ValueError), os_errors(ErrorCode.STORAGE_FATAL, "x", "y", "z"):
        raise ValueError(errno.EIO)
