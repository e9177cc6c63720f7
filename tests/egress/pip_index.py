"""The package index pip itself would use here, read at test time (never written into the
repository): `pip config get global.index-url`, else pip's own default (with the host its
files are served from)."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit


def pip_index() -> tuple[str, tuple[str, ...]]:
    """(index URL, the host names a download from it reaches)."""
    configured = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
        capture_output=True,
        text=True,
    )
    url = configured.stdout.strip() if configured.returncode == 0 else ""
    if url:
        return url, (urlsplit(url).hostname or "",)
    from pip._internal.models.index import PyPI

    return PyPI.simple_url, (PyPI.netloc, PyPI.file_storage_domain)


def pip_download_argv(index: str, bundle: str, dest: str) -> list[str]:
    """A confined `pip download` of one small package from `index` only: --isolated so the
    host's pip config (find-links, local file:// indexes) cannot answer it without the
    network."""
    return [
        "/usr/bin/python3",
        "-m",
        "pip",
        "download",
        "--isolated",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--retries",
        "0",
        "--timeout",
        "60",
        "--cert",
        bundle,
        "--index-url",
        index,
        "-d",
        dest,
        "six==1.16.0",
    ]
