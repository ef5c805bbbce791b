"""The one error tree of infercore, with Triton's error codes.

    TritonError                   (code)
    ├── UnknownError              UNKNOWN
    ├── InternalError             INTERNAL
    ├── NotFoundError             NOT_FOUND
    ├── InvalidArgumentError      INVALID_ARG
    ├── UnavailableError          UNAVAILABLE
    ├── UnsupportedError          UNSUPPORTED
    ├── AlreadyExistsError        ALREADY_EXISTS
    └── CancelledError            CANCELLED

The names and codes mirror Triton's in-process Python API (``tritonserver``), so code
written against it catches the same classes. No transport status lives here: only
``kserve/status.py`` maps a code to an HTTP or gRPC status (and back).
"""

from __future__ import annotations

import enum

__all__ = [
    "AlreadyExistsError",
    "CancelledError",
    "ErrorCode",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "TritonError",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
    "error_from_code",
]


class ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code values, in Triton's numbering."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


# TRITONSERVER_ErrorCodeString: how Triton names a code in "<code> - <message>" texts.
_CODE_NAMES = {ErrorCode.UNKNOWN: "Unknown", ErrorCode.INTERNAL: "Internal",
               ErrorCode.NOT_FOUND: "Not found", ErrorCode.INVALID_ARG: "Invalid argument",
               ErrorCode.UNAVAILABLE: "Unavailable", ErrorCode.UNSUPPORTED: "Unsupported",
               ErrorCode.ALREADY_EXISTS: "Already exists", ErrorCode.CANCELLED: "Cancelled"}


class TritonError(Exception):
    """Base of every error infercore raises on purpose."""

    code: ErrorCode = ErrorCode.UNKNOWN

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    @property
    def code_name(self) -> str:
        """The code as Triton writes it in messages ("Internal", "Invalid argument")."""
        return _CODE_NAMES[self.code]


class UnknownError(TritonError):
    code = ErrorCode.UNKNOWN


class InternalError(TritonError):
    code = ErrorCode.INTERNAL


class NotFoundError(TritonError):
    code = ErrorCode.NOT_FOUND


class InvalidArgumentError(TritonError):
    code = ErrorCode.INVALID_ARG


class UnavailableError(TritonError):
    code = ErrorCode.UNAVAILABLE


class UnsupportedError(TritonError):
    code = ErrorCode.UNSUPPORTED


class AlreadyExistsError(TritonError):
    code = ErrorCode.ALREADY_EXISTS


class CancelledError(TritonError):
    code = ErrorCode.CANCELLED


_BY_CODE: dict[ErrorCode, type[TritonError]] = {
    cls.code: cls
    for cls in (
        UnknownError,
        InternalError,
        NotFoundError,
        InvalidArgumentError,
        UnavailableError,
        UnsupportedError,
        AlreadyExistsError,
        CancelledError,
    )
}


def error_from_code(code: int | ErrorCode, message: str) -> TritonError:
    """Build the typed error for a Triton error code (unknown codes become UnknownError)."""
    try:
        cls = _BY_CODE[ErrorCode(code)]
    except ValueError:
        cls = UnknownError
    return cls(message)
