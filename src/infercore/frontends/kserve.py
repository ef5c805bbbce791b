"""The one place where engine errors become transport statuses, and shared KServe helpers.

HTTP statuses and gRPC codes follow Triton's frontends: INTERNAL -> 500 / INTERNAL,
NOT_FOUND -> 404 / NOT_FOUND, UNAVAILABLE -> 503 / UNAVAILABLE, UNSUPPORTED -> 501 /
UNIMPLEMENTED, and UNKNOWN, INVALID_ARG, ALREADY_EXISTS, CANCELLED -> 400 over HTTP.
"""

from __future__ import annotations

import logging

import grpc

from ..errors import ErrorCode, InternalError, TritonError

__all__ = ["as_triton_error", "grpc_status", "http_status"]

logger = logging.getLogger(__name__)

_HTTP_STATUS = {
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.UNKNOWN: 400,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
}

_GRPC_STATUS = {
    ErrorCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
}


def as_triton_error(exc: BaseException) -> TritonError:
    """The typed error to report for ``exc``; anything untyped is an internal error."""
    if isinstance(exc, TritonError):
        return exc
    logger.exception("unexpected error while serving a request", exc_info=exc)
    return InternalError(f"{type(exc).__name__}: {exc}")


def http_status(error: TritonError) -> int:
    return _HTTP_STATUS.get(error.code, 400)


def grpc_status(error: TritonError) -> grpc.StatusCode:
    return _GRPC_STATUS.get(error.code, grpc.StatusCode.UNKNOWN)
