"""The error tree (issue 28): one base, a family per code group, structured numbers, and every
error pickles whole -- fields, class and the OS's number (psutil's exceptions do; a
SprawlError whose args were its message could not be unpickled at all)."""

from __future__ import annotations

import errno
import pickle
import re
from pathlib import Path

import pytest

import sprawl_orch
from sprawl_orch.copy.sync import Bounds, sync
from sprawl_orch.core import errors
from sprawl_orch.core.errors import (
    ConfigError,
    CopyBoundError,
    ErrorCode,
    SprawlError,
    StorageError,
    from_os,
    os_errors,
)

FAMILIES = {code: SprawlError._FAMILY[code] for code in ErrorCode}


def _classes() -> dict[str, type[SprawlError]]:
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, SprawlError)
    }


def test_every_code_builds_its_family() -> None:
    assert set(FAMILIES) == set(ErrorCode)
    for code, family in FAMILIES.items():
        err = SprawlError(code, "subject", "detail", "recovery")
        assert type(err) is family and isinstance(err, SprawlError), code
        assert (err.code, err.subject, err.detail, err.recovery) == (
            code,
            "subject",
            "detail",
            "recovery",
        )
        assert str(err) == f"{code.value}: subject: detail (recovery: recovery)"
        # A family's own class builds itself; keywords work as positionals do.
        assert type(family(code, subject="s", detail="d", recovery="r")) is family
    assert isinstance(SprawlError(ErrorCode.COPY_BOUND, "s", "d", "r"), StorageError)


def test_the_docstrings_drawing_is_the_tree() -> None:
    drawn = {}  # class -> (parent drawn above it, code drawn beside it)
    parents: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^\s*((?:│\s{3}|\s{4})*)[├└]── (\w+)\s+(E_\w+)?", line)
        if match is None:
            if line.strip().startswith("SprawlError("):
                parents = ["SprawlError"]
            continue
        depth = len(match.group(1)) // 4 + 1
        parents = [*parents[:depth], match.group(2)]
        drawn[match.group(2)] = (parents[depth - 1], match.group(3))
    classes = _classes()
    assert set(drawn) == set(classes) - {"SprawlError"}, "draw every family, and only those"
    for name, (parent, code) in drawn.items():
        cls = classes[name]
        assert cls.__bases__[0] is classes[parent], f"{name} is drawn under {parent}"
        own = [c for c, family in FAMILIES.items() if family is cls]
        assert [c.value for c in own] == ([code] if code else []), name


def test_the_face_exports_every_family() -> None:
    assert set(_classes()) <= set(sprawl_orch.__all__)


def _round_trip(err: SprawlError) -> SprawlError:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert back.as_dict() == err.as_dict()
    assert str(back) == str(err) and back.args == err.args
    return back


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.value)
def test_each_family_pickles_whole(code: ErrorCode) -> None:
    _round_trip(SprawlError(code, "subject", "detail", "recovery"))


def test_structured_fields_pickle_too() -> None:
    config = ConfigError(
        ErrorCode.CONFIG_INVALID,
        "[sandbox] arm",
        "d",
        "r",
        key="[sandbox] arm",
        value=3,
        reason="accepted spellings: ...",
        path="/x/sprawl.toml",
    )
    back = _round_trip(config)
    assert isinstance(back, ConfigError)
    assert (back.key, back.value, back.reason, back.path) == (
        "[sandbox] arm",
        3,
        "accepted spellings: ...",
        "/x/sprawl.toml",
    )
    bound = CopyBoundError(ErrorCode.COPY_BOUND, "/t", "d", "r", bound="files", limit=2, reached=3)
    back_bound = _round_trip(bound)
    assert isinstance(back_bound, CopyBoundError)
    assert (back_bound.bound, back_bound.limit, back_bound.reached) == ("files", 2, 3)


def test_the_os_number_is_a_field_and_survives_pickling(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with (
        pytest.raises(SprawlError) as caught,
        os_errors(ErrorCode.STORAGE_FATAL, missing, "cannot read it", "make it"),
    ):
        missing.read_bytes()
    err = caught.value
    assert isinstance(err, StorageError) and isinstance(err.__cause__, FileNotFoundError)
    assert err.errno == errno.ENOENT
    assert err.detail == "cannot read it: No such file or directory"
    assert _round_trip(err).errno == errno.ENOENT
    # A raise ... from an OSError, without the translator, still carries the number.
    try:
        try:
            raise PermissionError(errno.EACCES, "Permission denied")
        except OSError as os_err:
            raise SprawlError(ErrorCode.SANDBOX_DENIED, "s", "d", "r") from os_err
    except SprawlError as from_cause:
        assert from_cause.errno == errno.EACCES
        assert _round_trip(from_cause).errno == errno.EACCES
    made = from_os(IsADirectoryError(errno.EISDIR, "x"), ErrorCode.CONFIG_INVALID, "p", "r", "f")
    assert (type(made), made.errno, made.detail) == (ConfigError, errno.EISDIR, "r: is a directory")


def test_a_copy_bound_carries_its_numbers(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "deep" / "er").mkdir(parents=True)
    for n in range(5):
        (src / f"f{n}").write_text("x" * 10)
    with pytest.raises(CopyBoundError) as files:
        sync(src, tmp_path / "c1", Bounds(files=3))
    assert (files.value.bound, files.value.limit, files.value.reached) == ("files", 3, 4)
    with pytest.raises(CopyBoundError) as size:
        sync(src, tmp_path / "c2", Bounds(bytes=25))
    assert (size.value.bound, size.value.limit) == ("bytes", 25)
    assert size.value.reached is not None and size.value.reached > 25
    with pytest.raises(CopyBoundError) as depth:
        sync(src, tmp_path / "c3", Bounds(depth=1))
    assert (depth.value.bound, depth.value.limit, depth.value.reached) == ("depth", 1, 2)
    assert _round_trip(depth.value).reached == 2
