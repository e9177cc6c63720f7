"""The errors sprawl-orch raises: one base, a family per code group, and their codes.

Every refusal or failure is a :class:`SprawlError` carrying four fields (code, subject,
detail, recovery) -- what was wrong ("[sandbox] arm", "bwrap", "/work/tree"), why with the
numbers ("101 000 files, bound is 100 000"), and what the person can do next. Its class
says the family, so a caller catches a group without reading codes (httpx's shape)::

    SprawlError(code, subject, detail, recovery)    + errno: the OS's number, when one said it
    ├── ConfigError        E_CONFIG_INVALID         + key, value, reason, path
    ├── CommandRefused     the command can't run here
    │   ├── SandboxDenied      E_SANDBOX_DENIED
    │   └── ToolUnavailable    E_TOOL_UNAVAILABLE
    ├── StorageError       E_STORAGE_FATAL
    │   └── CopyBoundError     E_COPY_BOUND         + bound, limit, reached
    ├── EngineError        a container engine or image said no
    │   ├── EngineRefused      E_ENGINE_REFUSED
    │   └── ImageInvalid       E_IMAGE_INVALID
    ├── RequestError       what a caller asked is not a thing we have
    │   ├── UnknownHandle      E_UNKNOWN_HANDLE     + handle
    │   └── BadRequest         E_BAD_REQUEST
    └── InternalError      E_INTERNAL: a bug in sprawl-orch itself

``SprawlError(code, ...)`` builds the family of its code (``SprawlError(ErrorCode.COPY_BOUND,
...)`` is a CopyBoundError), so every raise, old or new, lands in its family; a family's
extra fields are keyword-only and default to None. No family is also a ValueError or a
LookupError: pydantic turns a ValueError raised inside validation into its own error, and
`except ValueError` blocks in the code below would start catching refusals. Every error
pickles and unpickles whole, fields and class (psutil's habit: it crosses process pools),
which an Exception whose ``args`` are not its constructor's cannot do by default.

Lower layers raise these directly, or translate foreign exceptions at their boundary with
``raise ... from err`` so the cause stays attached; an OSError is translated by
:func:`os_errors` (psutil's ``wrap_exceptions`` shape: the boundary states the fields once,
the OS's reason and number are filled in). A refused command never changes the person's tree:
errors are raised before anything is started or after the copy is cleaned up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from os import PathLike
from typing import Any, ClassVar


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


def _rebuild(cls: type[SprawlError], state: dict[str, Any]) -> SprawlError:
    """Unpickling: the instance without calling a constructor (families have their own)."""
    err = Exception.__new__(cls)
    err.__dict__.update(state)
    err.args = (err.message(),)
    return err


class SprawlError(Exception):
    """A refusal or failure with a code, a subject, a detail and a recovery.

    Built as ``SprawlError(code, ...)`` it is an instance of its code's family (the tree in
    this module's docstring), so ``except ConfigError`` catches every config refusal.
    """

    # The family each code builds; filled by the families below.
    _FAMILY: ClassVar[dict[ErrorCode, type[SprawlError]]] = {}
    _errno: int | None = None  # from_os's; else the OSError cause's, read when asked

    def __new__(cls, *args: Any, **kwargs: Any) -> SprawlError:
        code = args[0] if args else kwargs.get("code")
        family = SprawlError._FAMILY.get(code) if isinstance(code, ErrorCode) else None
        if family is not None and issubclass(family, cls):
            cls = family  # the most specific class the caller's class allows
        return Exception.__new__(cls)

    def __init__(self, code: ErrorCode, subject: str, detail: str, recovery: str) -> None:
        """A refusal or failure.

        Args:
            code: its ErrorCode.
            subject: what was wrong ("[sandbox] arm", "bwrap", "/work/tree").
            detail: why, with the numbers.
            recovery: what the person can do next.
        """
        self.code = code
        self.subject = subject
        self.detail = detail
        self.recovery = recovery
        super().__init__(self.message())

    def message(self) -> str:
        """The one-line form, as ``str(err)`` says it.

        Returns:
            ``E_CODE: subject: detail (recovery: ...)``.
        """
        return f"{self.code.value}: {self.subject}: {self.detail} (recovery: {self.recovery})"

    @property
    def errno(self) -> int | None:
        """The OS's number when an OSError caused it (``raise ... from err`` or
        :func:`from_os`), else None."""
        if self._errno is not None:
            return self._errno
        cause = self.__cause__
        return cause.errno if isinstance(cause, OSError) else None

    def __reduce__(self) -> tuple[Any, ...]:
        # The cause does not survive pickling; its number does, as a field.
        return (_rebuild, (type(self), {**self.__dict__, "_errno": self.errno}))

    def as_dict(self) -> dict[str, str]:
        """The four fields as data.

        Returns:
            code (its E_... value), subject, detail and recovery.
        """
        return {
            "code": self.code.value,
            "subject": self.subject,
            "detail": self.detail,
            "recovery": self.recovery,
        }


def _family(*codes: ErrorCode) -> Any:
    def register(cls: type[SprawlError]) -> type[SprawlError]:
        for code in codes:
            SprawlError._FAMILY[code] = cls
        return cls

    return register


@_family(ErrorCode.CONFIG_INVALID)
class ConfigError(SprawlError):
    """E_CONFIG_INVALID: a sprawl.toml, a Config built in code, or a switch over it refused.
    `key` as the file spells it ("[sandbox] arm"), `value` the refused value, `reason` why,
    `path` the file (None for a Config built in code); each None where the refusal is not of
    one key."""

    key: str | None = None
    value: object = None
    reason: str | None = None
    path: str | None = None

    def __init__(
        self,
        code: ErrorCode,
        subject: str,
        detail: str,
        recovery: str,
        *,
        key: str | None = None,
        value: object = None,
        reason: str | None = None,
        path: str | None = None,
    ) -> None:
        """A config refusal.

        Args:
            code: E_CONFIG_INVALID.
            subject: what was wrong (the key, or the file).
            detail: why, with the value.
            recovery: what to change.
            key: the key as sprawl.toml spells it ("[sandbox] arm").
            value: the value refused.
            reason: why it was refused ("unknown key", "accepted spellings: ...").
            path: the file it was read from.
        """
        super().__init__(code, subject, detail, recovery)
        self.key, self.value, self.reason, self.path = key, value, reason, path


class CommandRefused(SprawlError):
    """The command can't run here: no arm gives what is asked, or its program can't start."""


@_family(ErrorCode.SANDBOX_DENIED)
class SandboxDenied(CommandRefused):
    """E_SANDBOX_DENIED: no arm can give the confinement the config asks for."""


@_family(ErrorCode.TOOL_UNAVAILABLE)
class ToolUnavailable(CommandRefused):
    """E_TOOL_UNAVAILABLE: the program (or the arm's own tool) is missing or can't run."""


@_family(ErrorCode.STORAGE_FATAL)
class StorageError(SprawlError):
    """E_STORAGE_FATAL: a file or directory we need could not be read or written."""


@_family(ErrorCode.COPY_BOUND)
class CopyBoundError(StorageError):
    """E_COPY_BOUND: the working directory is past a bound of the copy. `bound` is "files",
    "bytes" or "depth", `limit` its [sandbox.copy] max_<bound>, `reached` the count when the
    walk stopped (None where the refusal is a link loop, not a count)."""

    bound: str | None = None
    limit: int | None = None
    reached: int | None = None

    def __init__(
        self,
        code: ErrorCode,
        subject: str,
        detail: str,
        recovery: str,
        *,
        bound: str | None = None,
        limit: int | None = None,
        reached: int | None = None,
    ) -> None:
        """A copy bound reached.

        Args:
            code: E_COPY_BOUND.
            subject: the working directory.
            detail: which bound, the number reached, the largest top-level entries.
            recovery: the key to raise, or what to exclude.
            bound: "files", "bytes" or "depth".
            limit: the bound's value.
            reached: the count when the walk stopped.
        """
        super().__init__(code, subject, detail, recovery)
        self.bound, self.limit, self.reached = bound, limit, reached


class EngineError(SprawlError):
    """A container engine or an image said no."""


@_family(ErrorCode.ENGINE_REFUSED)
class EngineRefused(EngineError):
    """E_ENGINE_REFUSED: docker or podman refused or failed a step."""


@_family(ErrorCode.IMAGE_INVALID)
class ImageInvalid(EngineError):
    """E_IMAGE_INVALID: an image, recipe or pin is not what it must be."""


class RequestError(SprawlError):
    """What a caller (the API, serve, MCP) asked names nothing we have, or is malformed."""


@_family(ErrorCode.UNKNOWN_HANDLE)
class UnknownHandle(RequestError):
    """E_UNKNOWN_HANDLE: no command or kept change has that handle (its `subject`)."""

    @property
    def handle(self) -> str:
        """The handle asked for (the error's subject)."""
        return self.subject


@_family(ErrorCode.BAD_REQUEST)
class BadRequest(RequestError):
    """E_BAD_REQUEST: a request's shape or values are wrong."""


@_family(ErrorCode.INTERNAL)
class InternalError(SprawlError):
    """E_INTERNAL: a bug in sprawl-orch itself (serve answers it instead of dying)."""


def os_reason(err: OSError) -> str:
    """The OS's words for `err` ("Permission denied"); "is a directory" for EISDIR, whose
    strerror ("Is a directory") reads as if the path were fine."""
    if isinstance(err, IsADirectoryError):
        return "is a directory"
    return err.strerror or str(err)


def from_os(
    err: OSError, code: ErrorCode, subject: str | PathLike[str], doing: str, recovery: str
) -> SprawlError:
    """The one OSError -> SprawlError translation: SprawlError(code, subject, f"{doing}: <the
    OS's reason>", recovery) with the OS's number as `errno`. Raise it ``from err``."""
    translated = SprawlError(code, str(subject), f"{doing}: {os_reason(err)}", recovery)
    translated._errno = err.errno
    return translated


@contextmanager
def os_errors(
    code: ErrorCode, subject: str | PathLike[str], doing: str, recovery: str
) -> Iterator[None]:
    """An OSError raised in the block leaves it as :func:`from_os` says, the OSError kept as
    its cause. Other exceptions (and a SprawlError raised inside) pass through untouched."""
    try:
        yield
    except OSError as err:
        raise from_os(err, code, subject, doing, recovery) from err
