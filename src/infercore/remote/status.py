"""Transport statuses back to infercore's typed errors: the client side of kserve.py.

Triton maps its error codes to gRPC codes one to one, so gRPC gives the code back
exactly. HTTP folds UNKNOWN, INVALID_ARG, ALREADY_EXISTS and CANCELLED into 400; a 400
therefore comes back as InvalidArgumentError, the code Triton's 400s nearly always carry.
"""

from __future__ import annotations

import grpc

from ..errors import (
    AlreadyExistsError,
    CancelledError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)

__all__ = ["error_from_grpc", "error_from_http"]

_FROM_GRPC: dict[grpc.StatusCode, type[TritonError]] = {
    grpc.StatusCode.UNKNOWN: UnknownError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNIMPLEMENTED: UnsupportedError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.CANCELLED: CancelledError,
    # Not sent by Triton itself: the client's deadline, a message over the size limit.
    grpc.StatusCode.DEADLINE_EXCEEDED: UnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: UnavailableError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidArgumentError,
}

_FROM_HTTP: dict[int, type[TritonError]] = {
    400: InvalidArgumentError,
    404: NotFoundError,
    500: InternalError,
    501: UnsupportedError,
    503: UnavailableError,
}


def error_from_grpc(code: grpc.StatusCode | None, message: str) -> TritonError:
    """The typed error for a gRPC status (UnknownError for codes Triton never sends)."""
    cls = _FROM_GRPC.get(code, UnknownError) if code is not None else UnknownError
    return cls(message)


def error_from_http(status: int, message: str) -> TritonError:
    """The typed error for an HTTP status: other 4xx are invalid requests, other 5xx
    (a proxy's 502 or 504) mean the server cannot be reached."""
    cls = _FROM_HTTP.get(status)
    if cls is None:
        cls = InvalidArgumentError if status < 500 else UnavailableError
    return cls(message)
