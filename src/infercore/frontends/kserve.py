"""The one place where engine errors become transport statuses, and shared KServe helpers.

HTTP statuses and gRPC codes follow Triton's frontends: INTERNAL -> 500 / INTERNAL,
NOT_FOUND -> 404 / NOT_FOUND, UNAVAILABLE -> 503 / UNAVAILABLE, UNSUPPORTED -> 501 /
UNIMPLEMENTED, and UNKNOWN, INVALID_ARG, ALREADY_EXISTS, CANCELLED -> 400 over HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from ..errors import ErrorCode, InternalError, InvalidArgumentError, TritonError
from ..request import request_label
from ..validation import datatype_mismatch

__all__ = ["InputByteSizeError", "as_triton_error", "grpc_status", "http_status"]

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


class InputByteSizeError(InvalidArgumentError):
    """An input's bytes (binary, raw or in shared memory) do not hold its shape in its
    datatype. The decoders find it; Triton's core finds it later, once it has compared
    the datatype with the model's, and labels it with the request's id: ``answer``."""

    def __init__(self, name: str, data_type: str, model: str, expected: int, got: int,
                 request_id: str = "") -> None:
        super().__init__(f"{request_label(request_id)}input byte size mismatch for input "
                         f"'{name}' for model '{model}'. Expected {expected}, got {got}")
        self.details = (name, data_type, model, expected, got)
        self.request_id = request_id

    def of_request(self, request_id: str) -> InputByteSizeError:
        """This error, labelled with ``request_id``."""
        return InputByteSizeError(*self.details, request_id=request_id)

    def answer(self, model_inputs: Sequence[Mapping[str, Any]]) -> InvalidArgumentError:
        """What Triton answers: the datatype mismatch when the model's input (from its
        metadata) has another datatype, else this error."""
        name, data_type, model, _, _ = self.details
        for spec in model_inputs:
            if spec.get("name") == name and spec.get("datatype") != data_type:
                return InvalidArgumentError(datatype_mismatch(
                    request_label(self.request_id), name, data_type, model,
                    str(spec.get("datatype"))))
        return self
