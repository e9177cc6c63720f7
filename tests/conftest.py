"""Every pytest session gets a base temp directory of its own.

pytest's default base, /tmp/pytest-of-<user>, is shared by every session of that user: a new
session chmods it 0700 (which rewrites its POSIX ACL mask and silences the search entries a
root caller's bwrap uid needs: native_fallbacks/sandbox_uid.py) and deletes all but the
three newest `pytest-N` directories, possibly one a longer session is still using. On a
machine where several sessions run at once (developers side by side) tests then failed with
bwrap's "Can't find source path ...: Permission denied" or vanished files. A `--basetemp`
given on the command line still wins.

Hypothesis runs without its 200 ms per-example deadline and its too-slow health check: with
seven other suites on two cores an example's time says nothing about the code, and both turned
a correct property into a failure (DeadlineExceeded / FailedHealthCheck). What the properties
assert is unchanged.
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "sprawl-loaded-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("sprawl-loaded-machine")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not config.option.basetemp:
        config.option.basetemp = tempfile.mkdtemp(prefix="sprawl-pytest-")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    base = str(config.option.basetemp or "")
    if base.startswith(tempfile.gettempdir()) and "sprawl-pytest-" in base:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests tests/slow_files.py names `slow` (`pytest -m "not slow"`)."""
    from tests.slow_files import SLOW_FILES

    for item in items:
        node = item.nodeid
        if any(node == s or node.startswith((s + "/", s + "::")) for s in SLOW_FILES):
            item.add_marker(pytest.mark.slow)
