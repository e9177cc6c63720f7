"""Build logs go to a directory of this account's own (images/buildlog.log_dir): one name per uid,
and a directory of another account is refused with a code, not written into."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.images.buildlog import log_dir


def test_the_default_is_per_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPRAWL_BUILD_LOGS", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    path = log_dir()
    assert path == tmp_path / f"sprawl-orch-build-logs-{os.getuid()}"
    assert path.stat().st_mode & 0o777 == 0o700


def test_another_accounts_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)  # nobody's
    else:
        theirs = Path("/")  # root's, as the CI's root-made directory was
    monkeypatch.setenv("SPRAWL_BUILD_LOGS", str(theirs))
    with pytest.raises(SprawlError) as raised:
        log_dir()
    assert raised.value.code is ErrorCode.CONFIG_INVALID
    assert "SPRAWL_BUILD_LOGS" in raised.value.recovery
