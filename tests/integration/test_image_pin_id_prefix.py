"""`image pin REF` where REF is both a local name and the start of another image's ID, on real
docker and podman (issue 27, item 15: a pin resolves exactly the reference given and refuses
an ambiguous one naming every candidate). Both engines look the name up first, so the pin
took the named image without a word about the image whose ID the person may have copied."""

from __future__ import annotations

import io
import secrets
import subprocess
import tarfile
from pathlib import Path

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.images.pin import pin


def _own_image(cli: str) -> str:
    """An image of this test's own (a one-file tar with a fresh token: a fresh ID)."""
    data = f"atkws {secrets.token_hex(8)}\n".encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("marker")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    done = subprocess.run(
        [cli, "import", "/dev/stdin"], input=out.getvalue(), capture_output=True, check=True
    )
    image_id = done.stdout.decode().split()[-1]
    return image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"


@pytest.mark.parametrize("cli", ["docker", "podman"])
def test_a_name_that_is_another_images_id_prefix_is_refused_naming_both(
    cli: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The session's image (whose ID the person copied) keeps no tag of this test's: removing
    # an image's last tag removes the image, and the session's other tests need it.
    session = request.getfixturevalue(f"{cli}_image")
    named = _own_image(cli)
    prefix = session[7:19]
    subprocess.run([cli, "tag", named, f"{prefix}:latest"], check=True, capture_output=True)
    try:
        with pytest.raises(SprawlError) as err:
            pin(prefix, tmp_path / "sprawl.toml", engine_name=cli)
        assert err.value.code is ErrorCode.IMAGE_INVALID
        assert named in err.value.detail and session in err.value.detail, err.value.detail
        assert not (tmp_path / "sprawl.toml").exists()
        # The whole ID is an ID only: it pins the image it names.
        done = pin(session, tmp_path / "sprawl.toml", engine_name=cli)
        assert done.resolved == {cli: session}
    finally:
        subprocess.run([cli, "rmi", "--force", named], capture_output=True)
