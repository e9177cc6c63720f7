"""No package registry's or mirror's host name is written into the repository (issue 27, item
17: the recipes, tests and docs once named one Debian mirror host; BRIEF: never a package
registry's host). The hosts looked for are read from this machine's own configuration -- apt's
sources, pip's index settings and defaults, docker's SDK -- so this file names none either."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from sprawl_orch.images.apt_sources import sources

ROOT = Path(__file__).resolve().parents[2]


def _pip_hosts() -> set[str]:
    from pip._internal.models.index import PyPI

    hosts = {PyPI.netloc, PyPI.file_storage_domain}
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    for line in listed.splitlines():
        if "index-url" in line.split("=", 1)[0] or "trusted-host" in line.split("=", 1)[0]:
            for word in line.split("=", 1)[1].strip("'\"").split():
                hosts.add(urlparse(word).hostname or word)
    return hosts


def registry_hosts() -> set[str]:
    from docker.auth import INDEX_URL

    hosts = {urlparse(s.uri).hostname or "" for s in sources()}
    hosts |= _pip_hosts() | {urlparse(INDEX_URL).hostname or ""}
    # file:// indexes and bare words have no host; a one-label name would match ordinary words.
    return {h for h in hosts if h.count(".") >= 1 and not h.startswith("/")}


def test_the_hosts_are_found_on_this_machine() -> None:
    # pip's default index and docker's default registry are always known: a reader that
    # found nothing would let the test below pass over an empty list.
    assert len(registry_hosts()) >= 3


def test_no_registry_or_mirror_host_is_in_the_repository() -> None:
    hosts = sorted(registry_hosts())
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    named: list[str] = []
    for name in filter(None, files):
        path = ROOT / name.decode()
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace").lower()
        named += [f"{name.decode()}: {h}" for h in hosts if h.lower() in text]
    assert named == []
