"""A unix-socket docker client reads neither proxy variables nor ~/.netrc per request
(engines/docker.one_pool: requests' merge_environment_settings walked the caller's whole
environment on each of a warm call's four requests); a tcp client still honours both."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
import requests

from sprawl_orch.engines.docker import one_pool

URL = "http+docker://localhost/v1.41/info"


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine localhost login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))


def test_a_unix_client_reads_no_proxy_or_netrc(environment: None) -> None:
    api = docker.APIClient(base_url="unix:///run/sprawl-no-such.sock", version="1.41")
    one_pool(api)
    settings = api.merge_environment_settings(URL, {}, None, None, None)
    assert settings["proxies"] == {}
    prepared = api.prepare_request(requests.Request("GET", URL))
    assert "Authorization" not in prepared.headers
    api.close()


def test_a_tcp_client_keeps_the_environment(environment: None) -> None:
    api = docker.APIClient(base_url="tcp://127.0.0.1:9", version="1.41")
    one_pool(api)
    url = "http://127.0.0.1:9/v1.41/info"
    settings = api.merge_environment_settings(url, {}, None, None, None)
    assert settings["proxies"].get("http") == "http://127.0.0.1:9"
    api.close()
