"""A confined `pip download` through the proxy on docker and podman (runc), for real: the
python recipe image (debootstrap, no registry) built here, the index the one pip itself uses on
this machine (read at test time), trust = "host" (these machines re-sign outbound TLS with a CA
only the host trusts). Listed: the wheel arrives; unlisted: refused and recorded."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sprawl_orch import ExecTool
from sprawl_orch.config import parse_config
from sprawl_orch.egress.plan import host_bundle
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.images.cli import image
from tests.egress.pip_index import pip_index
from tests.integration.conftest import engine_absent, engine_problem, remove_image


@pytest.fixture(scope="module")
def python_ids() -> Iterator[dict[str, str]]:
    for name in ENGINES:
        problem = engine_problem(name)
        if problem is not None:
            engine_absent(name, problem)
    tag = f"sprawl-test/egress-python:{secrets.token_hex(4)}"
    built = CliRunner().invoke(
        image, ["build", "python", "--tag", tag, "--engine", "all", "--json"]
    )
    ids = dict(json.loads(built.stdout)["images"]) if built.exit_code == 0 else {}
    try:
        assert built.exit_code == 0, built.output
        yield ids
    finally:
        for engine, image_id in ids.items():
            remove_image(engine, image_id)


def _pip(tmp_path: Path, engine: str, image_id: str, allow: list[str]) -> dict[str, object]:
    index, _hosts = pip_index()
    bundle = host_bundle({"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"})
    assert bundle is not None
    tree = tmp_path / f"tree-{len(allow)}"
    tree.mkdir()
    config = parse_config(
        {
            "sandbox": {
                "arm": "container",
                "scratch_dir": str(tmp_path),
                "container": {"engine": engine, "images": {engine: image_id}},
                "network": {"allow": allow, "trust": "host"},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    argv = ["python3", "-m", "pip", "download", "--isolated", "--no-deps", "--no-cache-dir"]
    argv += ["--retries", "0", "--timeout", "60", "--cert", str(bundle)]
    argv += ["--index-url", index, "-d", "dl", "six==1.16.0"]
    with ExecTool(config, tree, record=False) as tool:
        return tool.exec(argv, timeout=600).as_json_dict()


@pytest.mark.parametrize("engine", ENGINES)
def test_pip_download_through_the_proxy(
    python_ids: dict[str, str], tmp_path: Path, engine: str
) -> None:
    _index, hosts = pip_index()
    listed = _pip(tmp_path, engine, python_ids[engine], list(hosts))
    assert listed["exit_code"] == 0, listed
    assert "Saved" in str(listed["stdout"])
    network = listed["network"]
    assert isinstance(network, dict)
    assert {(e["host"], e["allowed"]) for e in network["egress"]} == {(h, True) for h in hosts}
    unlisted = _pip(tmp_path, engine, python_ids[engine], ["example.invalid"])
    assert unlisted["exit_code"] != 0
    network = unlisted["network"]
    assert isinstance(network, dict)
    refused = [e for e in network["egress"] if not e["allowed"]]
    assert refused and all("not in the allow list" in e["reason"] for e in refused)
