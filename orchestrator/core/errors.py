"""The one error type sprawl-orch raises, and its codes.

Every refusal or failure is a :class:`SprawlError` carrying four fields::

    SprawlError
      code      -- one of ErrorCode (E_CONFIG_INVALID, E_SANDBOX_DENIED, ...)
      subject   -- what was wrong ("[sandbox] arm", "bwrap", "/work/tree")
      detail    -- why, with the numbers ("101 000 files, bound is 100 000")
      recovery  -- what the person can do next

Lower layers raise it directly, or translate foreign exceptions at their
boundary with ``raise SprawlError(...) from err`` so the cause stays attached; an OSError
is translated by :func:`os_errors` (psutil's ``wrap_exceptions`` shape: the boundary states
the fields once, the OS's reason is filled in).
A refused command never changes the person's tree: errors are raised before
anything is started or after the copy is cleaned up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from os import PathLike


class ErrorCode(StrEnum):
    """Every refusal's code; a result's `code` and a serve error's `code` are one of these."""

    CONFIG_INVALID = "E_CONFIG_INVALID"
    SANDBOX_DENIED = "E_SANDBOX_DENIED"
    TOOL_UNAVAILABLE = "E_TOOL_UNAVAILABLE"
    STORAGE_FATAL = "E_STORAGE_FATAL"
    COPY_BOUND = "E_COPY_BOUND"
    ENGINE_REFUSED = "E_ENGINE_REFUSED"
    IMAGE_INVALID = "E_IMAGE_INVALID"
    UNKNOWN_HANDLE = "E_UNKNOWN_HANDLE"
    BAD_REQUEST = "E_BAD_REQUEST"
    # A bug in sprawl-orch itself (serve answers it instead of dying).
    INTERNAL = "E_INTERNAL"


class SprawlError(Exception):
    """A refusal or failure with a code, a subject, a detail and a recovery."""

    def __init__(self, code: ErrorCode, subject: str, detail: str, recovery: str) -> None:
        self.code = code
        self.subject = subject
        self.detail = detail
        self.recovery = recovery
        super().__init__(f"{code.value}: {subject}: {detail} (recovery: {recovery})")

    def as_dict(self) -> dict[str, str]:
        return {
            "code": self.code.value,
            "subject": self.subject,
            "detail": self.detail,
            "recovery": self.recovery,
        }


def os_reason(err: OSError) -> str:
    """The OS's words for `err` ("Permission denied"); "is a directory" for EISDIR, whose
    strerror ("Is a directory") reads as if the path were fine."""
    if isinstance(err, IsADirectoryError):
        return "is a directory"
    return err.strerror or str(err)


@contextmanager
def os_errors(
    code: ErrorCode, subject: str | PathLike[str], doing: str, recovery: str
) -> Iterator[None]:
    """An OSError raised in the block leaves it as SprawlError(code, subject,
    f"{doing}: <the OS's reason>", recovery), the OSError kept as its cause. Other
    exceptions (and a SprawlError raised inside) pass through untouched."""
    try:
        yield
    except OSError as err:
        raise SprawlError(code, str(subject), f"{doing}: {os_reason(err)}", recovery) from err
