"""Issue 25 on containers with trust = "image", for real on docker and podman: the command's
one bundle holds its image's own CAs plus the run's CA. The image (the python recipe with curl,
debootstrapped from this machine's apt mirror, then a layer FROM it) trusts a CA that neither
the host nor the proxy knows; an allowed host signed by it, left an opaque tunnel, verifies
inside with curl and with Python, while the bound host, signed by a CA only the host trusts,
is reached through the interception and receives the value in the header curl and Python
sent with the placeholder."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from click.testing import CliRunner

from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.images.cli import image
from tests.integration.conftest import engine_absent, engine_problem, remove_image
from tests.integration.test_secrets_real import PYTHON, VALUE, _judge, _run
from tests.secrets.echo import Echo, echo_upstream


def _build(*args: str) -> dict[str, str]:
    built = CliRunner().invoke(image, ["build", *args, "--engine", "all", "--json"])
    assert built.exit_code == 0, built.output
    return dict(json.loads(built.stdout)["images"])


@pytest.fixture(scope="module")
def image_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def curl_images(
    image_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """{engine: image ID} of an image with curl whose CA bundle is `image_ca` alone."""
    for name in ENGINES:
        problem = engine_problem(name)
        if problem is not None:
            engine_absent(name, problem)
    run = secrets.token_hex(4)
    base_tag, tag = f"sprawl-test/secrets-curl:{run}", f"sprawl-test/secrets-image-ca:{run}"
    made: list[dict[str, str]] = []
    try:
        made.append(_build("python", "--include", "curl", "--tag", base_tag))
        context = tmp_path_factory.mktemp("image-ca")
        (context / "ca-certificates.crt").write_bytes(image_ca.cert_pem.bytes())
        # COPY only: no RUN, so the build needs no network and no runtime.
        (context / "Dockerfile").write_text(
            f"FROM {base_tag}\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"
        )
        made.append(_build("--dockerfile", str(context / "Dockerfile"), "--tag", tag))
        yield made[-1]
    finally:
        for ids in reversed(made):
            for engine, image_id in ids.items():
                remove_image(engine, image_id)


@pytest.fixture
def ups(image_ca: trustme.CA) -> Iterator[tuple[Echo, Echo]]:
    """The bound upstream signed by a CA the host trusts (the proxy verifies it), the other
    by the image's CA alone."""
    with echo_upstream(trustme.CA()) as bound, echo_upstream(image_ca) as other:
        yield bound, other


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_image_cas_and_curl_in_containers(
    tmp_path: Path, ups: tuple[Echo, Echo], curl_images: dict[str, str], engine: str
) -> None:
    bound, other = ups
    curl = (
        f'curl -sS -H "Authorization: Bearer $GH_PAT" https://localhost:{bound.port}/curl; echo; '
        f'curl -sS -H "Authorization: Bearer $GH_PAT" https://localhost:{other.port}/curl; echo; '
    )
    script = PYTHON.format(bound=bound.port, other=other.port)
    sandbox = {
        "arm": "container",
        "container": {"engine": engine, "images": {engine: curl_images[engine]}},
    }
    result = _run(tmp_path, ups, sandbox, curl + f"python3 -c '{script}'", trust="image")
    # curl's and Python's requests reached both: the other only because the image's CA was
    # in the bundle (the host's SSL_CERT_FILE names the bound host's CA, not this one).
    _judge(tmp_path, ups, result, curl=True)
    assert [s.path for s in other.seen] == ["/curl", "/py"]
    assert {s.headers["authorization"] for s in bound.seen} == {
        f"Bearer {VALUE}",
        f"token {VALUE}",
    }


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_image_without_its_ca_fails_the_unbound_host(
    tmp_path: Path, ups: tuple[Echo, Echo], curl_images: dict[str, str], engine: str
) -> None:
    """The control: trust = "host" puts the host's CAs in the bundle instead of the image's,
    and the same curl to the image-signed host fails verification (the test above can fail)."""
    _bound, other = ups
    sandbox = {
        "arm": "container",
        "container": {"engine": engine, "images": {engine: curl_images[engine]}},
    }
    line = f"curl -sS https://localhost:{other.port}/curl; echo EXIT $?"
    result = _run(tmp_path, ups, sandbox, line, trust="host")
    assert "EXIT 60" in result.stdout, result.as_json_dict()  # CURLE_PEER_FAILED_VERIFICATION
    assert other.seen == []
