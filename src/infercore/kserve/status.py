"""The one table of Triton's error codes, HTTP statuses and gRPC codes, both directions.

Server side (``http_status``, ``grpc_status``): as Triton's frontends answer. INTERNAL ->
500 / INTERNAL, NOT_FOUND -> 404 / NOT_FOUND, UNAVAILABLE -> 503 / UNAVAILABLE,
UNSUPPORTED -> 501 / UNIMPLEMENTED; UNKNOWN, INVALID_ARG, ALREADY_EXISTS and CANCELLED
are 400 over HTTP and their own codes over gRPC.

Client side (``error_from_http``, ``error_from_grpc``): the same rows read backwards.
gRPC gives the code back exactly. HTTP folds four codes into 400; a 400 comes back as
InvalidArgumentError, the code Triton's 400s nearly always carry (the row marked
``http_reverse``). Statuses Triton never sends (a proxy's 502, a client deadline) have
their own small table.

Pure lookups; no state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from ..errors import (
    ErrorCode,
    InternalError,
    InvalidArgumentError,
    TritonError,
    UnavailableError,
    UnknownError,
    error_from_code,
)

__all__ = ["STATUS_TABLE", "StatusRow", "as_triton_error", "error_from_grpc",
           "error_from_http", "grpc_status", "http_status"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StatusRow:
    code: ErrorCode
    http: int
    grpc: grpc.StatusCode
    http_reverse: bool  # the code an HTTP client reads back for this status


STATUS_TABLE: tuple[StatusRow, ...] = (
    StatusRow(ErrorCode.UNKNOWN, 400, grpc.StatusCode.UNKNOWN, False),
    StatusRow(ErrorCode.INTERNAL, 500, grpc.StatusCode.INTERNAL, True),
    StatusRow(ErrorCode.NOT_FOUND, 404, grpc.StatusCode.NOT_FOUND, True),
    StatusRow(ErrorCode.INVALID_ARG, 400, grpc.StatusCode.INVALID_ARGUMENT, True),
    StatusRow(ErrorCode.UNAVAILABLE, 503, grpc.StatusCode.UNAVAILABLE, True),
    StatusRow(ErrorCode.UNSUPPORTED, 501, grpc.StatusCode.UNIMPLEMENTED, True),
    StatusRow(ErrorCode.ALREADY_EXISTS, 400, grpc.StatusCode.ALREADY_EXISTS, False),
    StatusRow(ErrorCode.CANCELLED, 400, grpc.StatusCode.CANCELLED, False),
)

# gRPC codes Triton itself does not send: the client's deadline, a message over the size
# limit, and codes a proxy or the gRPC library may produce.
_GRPC_ONLY_FROM_CLIENT: dict[grpc.StatusCode, ErrorCode] = {
    grpc.StatusCode.DEADLINE_EXCEEDED: ErrorCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ErrorCode.UNAVAILABLE,
    grpc.StatusCode.OUT_OF_RANGE: ErrorCode.INVALID_ARG,
    grpc.StatusCode.FAILED_PRECONDITION: ErrorCode.INVALID_ARG,
}

_TO_HTTP = {row.code: row.http for row in STATUS_TABLE}
_TO_GRPC = {row.code: row.grpc for row in STATUS_TABLE}
_FROM_GRPC = {row.grpc: row.code for row in STATUS_TABLE} | _GRPC_ONLY_FROM_CLIENT
_FROM_HTTP = {row.http: row.code for row in STATUS_TABLE if row.http_reverse}


def as_triton_error(exc: BaseException) -> TritonError:
    """The typed error to report for ``exc``; anything untyped is an internal error."""
    if isinstance(exc, TritonError):
        return exc
    logger.exception("unexpected error while serving a request", exc_info=exc)
    return InternalError(f"{type(exc).__name__}: {exc}")


def http_status(error: TritonError) -> int:
    return _TO_HTTP.get(error.code, 400)


def grpc_status(error: TritonError) -> grpc.StatusCode:
    return _TO_GRPC.get(error.code, grpc.StatusCode.UNKNOWN)


def error_from_grpc(code: grpc.StatusCode | None, message: str) -> TritonError:
    """The typed error for a gRPC status (UnknownError for codes Triton never sends)."""
    error_code = _FROM_GRPC.get(code) if code is not None else None
    return error_from_code(error_code, message) if error_code is not None else UnknownError(
        message)


def error_from_http(status: int, message: str) -> TritonError:
    """The typed error for an HTTP status: other 4xx are invalid requests, other 5xx
    (a proxy's 502 or 504) mean the server cannot be reached."""
    code = _FROM_HTTP.get(status)
    if code is not None:
        return error_from_code(code, message)
    return InvalidArgumentError(message) if status < 500 else UnavailableError(message)
