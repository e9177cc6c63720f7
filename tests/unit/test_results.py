"""Result shapes and the output cap (design §10)."""

from __future__ import annotations

from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.results import OUTPUT_CAP, ExecResult, exceptional, read_capped


def test_short_output_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "stdout"
    path.write_bytes(b"hello\n")
    assert read_capped(path, tmp_path / "keep") == ("hello\n", None)


def test_long_output_is_cut_with_the_way_back(tmp_path: Path) -> None:
    path = tmp_path / "stdout"
    data = b"x" * (OUTPUT_CAP + 10)
    path.write_bytes(data)
    text, full = read_capped(path, tmp_path / "keep")
    assert full == str(tmp_path / "keep" / "stdout")
    assert text.startswith("x" * OUTPUT_CAP)
    assert f"cut at {OUTPUT_CAP} of {OUTPUT_CAP + 10} bytes" in text
    assert Path(full).read_bytes() == data


def test_undecodable_bytes_become_replacement(tmp_path: Path) -> None:
    path = tmp_path / "stdout"
    path.write_bytes(b"caf\xe9\n")
    text, _ = read_capped(path, None)
    assert text == "caf\ufffd\n"


def test_exceptional_shape() -> None:
    err = SprawlError(ErrorCode.SANDBOX_DENIED, "bwrap", "no userns", "use a host")
    result = exceptional("linux_namespaces", err, command=["true"])
    data = result.as_json_dict()
    assert data["outcome"] == "exceptional"
    assert (data["code"], data["subject"], data["detail"], data["recovery"]) == (
        "E_SANDBOX_DENIED",
        "bwrap",
        "no userns",
        "use a host",
    )
    assert data["exit_code"] is None


def test_result_keys_are_owned_here() -> None:
    keys = set(ExecResult.model_fields)
    spec_keys = {
        "arm",
        "stdout",
        "stderr",
        "exit_code",
        "outcome",
        "handle",
        "code",
        "detail",
        "background",
        "env",
        "interpreter",
        "memory_ceiling",
        "confinement",
        "work",
        "container",
    }
    assert spec_keys <= keys
