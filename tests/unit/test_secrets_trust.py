"""The proxy's upstream trust and the host's bundle, read once per version of their inputs:
the context cache follows OpenSSL's default store when no file is named, and the host's
bundle is size-checked before it is read, then kept per (path, dev, ino, size, mtime)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trustme

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress.plan import MAX_BUNDLE
from sprawl_orch.secrets import plan as secrets_plan
from sprawl_orch.secrets.run import trust_key, upstream_context


def _subjects(cafile: str | None) -> set[str]:
    ctx = upstream_context(cafile)
    return {
        str(dict(x[0] for x in cert["subject"]).get("organizationName"))
        for cert in ctx.get_ca_certs()
    }


def _ca_file(where: Path, name: str) -> tuple[Path, str]:
    ca = trustme.CA(organization_name=name)
    path = where / f"{name}.pem"
    path.write_bytes(ca.cert_pem.bytes())
    return path, name


def test_the_default_store_is_followed_when_no_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no file named, SSL_CERT_FILE (read by OpenSSL's defaults) decides the store: the
    key was constant before, and the first store loaded was used for the process's life."""
    first, first_name = _ca_file(tmp_path, "first-store")
    second, second_name = _ca_file(tmp_path, "second-store")
    monkeypatch.setenv("SSL_CERT_FILE", str(first))
    key = trust_key(None)
    assert first_name in _subjects(None)
    monkeypatch.setenv("SSL_CERT_FILE", str(second))
    assert trust_key(None) != key
    assert second_name in _subjects(None) and first_name not in _subjects(None)


def test_a_ca_added_to_the_default_directory_changes_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "certs"
    store.mkdir()
    monkeypatch.setenv("SSL_CERT_DIR", str(store))
    before = trust_key(None)
    _ca_file(store, "added")
    os.utime(store, ns=(1, 1))  # a directory's mtime may not move within one clock tick
    assert trust_key(None) != before


def test_the_hosts_bundle_is_read_once_per_version(tmp_path: Path) -> None:
    path, _ = _ca_file(tmp_path, "host")
    first = secrets_plan.host_cas(path)
    assert secrets_plan.host_cas(path) is first  # kept, not read again
    path.write_bytes(path.read_bytes() + b"\n")
    os.utime(path, ns=(2, 2))
    again = secrets_plan.host_cas(path)
    assert again is not first and again.endswith(b"\n\n")
    assert sum(1 for k in secrets_plan._bundles if k[0] == str(path)) == 1


def test_an_oversized_bundle_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.pem"
    with open(path, "wb") as f:
        f.truncate(MAX_BUNDLE + 1)  # sparse: refused by its size, nothing read
    with pytest.raises(SprawlError) as refused:
        secrets_plan.host_cas(path)
    assert refused.value.code is ErrorCode.CONFIG_INVALID
    assert "huge.pem" in str(refused.value) and "SSL_CERT_FILE" in str(refused.value)


def test_a_fifo_as_the_bundle_is_refused_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "fifo.pem"
    os.mkfifo(path)
    with pytest.raises(SprawlError) as refused:
        secrets_plan.host_cas(path)
    assert "not a regular file" in str(refused.value)
