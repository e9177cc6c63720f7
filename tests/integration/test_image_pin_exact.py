"""`image pin` resolves exactly the reference given (issue 27, item 15), on real podman: its
short-name matching once pinned `localhost/sprawl/busybox:latest` for `busybox:latest` while
another `localhost/…/busybox:latest` existed."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.images.engines import engine
from sprawl_orch.images.pin import pin


@pytest.fixture
def names(podman_image: str) -> Iterator[tuple[str, str, str]]:
    """Two local names ending in one short name, and that short name (own tokens: other
    sessions tag images on the same podman)."""
    tok = secrets.token_hex(4)
    short = f"pin-{tok}:t{tok}"
    first, second = f"localhost/a{tok}/{short}", f"localhost/b{tok}/{short}"
    subprocess.run(["podman", "tag", podman_image, first], check=True)
    yield first, second, short
    for name in (first, second):
        subprocess.run(["podman", "untag", podman_image, name], capture_output=True)


def test_a_short_name_match_alone_is_refused_naming_it(names: tuple[str, str, str]) -> None:
    first, _, short = names
    with pytest.raises(SprawlError) as err:
        engine("podman").resolve(short)
    assert err.value.code is ErrorCode.IMAGE_INVALID
    assert "would match it by short name" in err.value.detail and first in err.value.detail


def test_the_full_name_resolves_and_an_ambiguous_short_name_names_both(
    names: tuple[str, str, str], podman_image: str
) -> None:
    first, second, short = names
    podman = engine("podman")
    assert podman.resolve(first) == podman_image
    other = (
        subprocess.run(
            ["podman", "import", "--message", "second", "/dev/stdin"],
            input=_tiny_tar(),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split()[-1]
    )
    subprocess.run(["podman", "tag", other, second], check=True)
    try:
        with pytest.raises(SprawlError) as err:
            podman.resolve(short)
        assert first in err.value.detail and second in err.value.detail
        # The exact spelling still resolves to its own image.
        assert podman.resolve(second) != podman_image
    finally:
        subprocess.run(["podman", "rmi", "--force", other], capture_output=True)


def test_the_pin_says_what_each_engine_did(names: tuple[str, str, str], tmp_path: Path) -> None:
    # docker was skipped without a word (issue 27, item 15); the name is podman's alone here.
    first, _, short = names
    config = tmp_path / "sprawl.toml"
    done = pin(first, config)
    assert list(done.written) == ["[sandbox.container.images] podman"]
    assert done.notes == (f"docker: {first} is not a local image there; nothing pinned for docker",)
    with pytest.raises(SprawlError) as err:
        pin(short, tmp_path / "other.toml")
    assert err.value.detail.startswith(f"podman: {short} is no local image's name in podman")
    assert f"docker: {short} is not a local image there" in err.value.detail
    assert not (tmp_path / "other.toml").exists()


def _tiny_tar() -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = b"second image\n"
        info = tarfile.TarInfo("marker")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
