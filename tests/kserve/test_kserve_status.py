"""kserve/status.py: every error code through the server's status and back through the
client's reading of it, over HTTP and gRPC, and what a client makes of statuses Triton
never sends."""

from __future__ import annotations

import grpc
import pytest

from infercore.errors import (
    ErrorCode,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    UnknownError,
    error_from_code,
)
from infercore.kserve.status import (
    STATUS_TABLE,
    as_triton_error,
    error_from_grpc,
    error_from_http,
    grpc_status,
    http_status,
)

# Triton 2.51's answers (its http_server.cc / grpc_server.cc status mapping)
_TRITON = {
    ErrorCode.UNKNOWN: (400, grpc.StatusCode.UNKNOWN),
    ErrorCode.INTERNAL: (500, grpc.StatusCode.INTERNAL),
    ErrorCode.NOT_FOUND: (404, grpc.StatusCode.NOT_FOUND),
    ErrorCode.INVALID_ARG: (400, grpc.StatusCode.INVALID_ARGUMENT),
    ErrorCode.UNAVAILABLE: (503, grpc.StatusCode.UNAVAILABLE),
    ErrorCode.UNSUPPORTED: (501, grpc.StatusCode.UNIMPLEMENTED),
    ErrorCode.ALREADY_EXISTS: (400, grpc.StatusCode.ALREADY_EXISTS),
    ErrorCode.CANCELLED: (400, grpc.StatusCode.CANCELLED),
}


def test_the_table_has_one_row_per_code():
    assert sorted(row.code for row in STATUS_TABLE) == sorted(ErrorCode)


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_server_statuses_are_tritons(code):
    error = error_from_code(code, "text")
    assert (http_status(error), grpc_status(error)) == _TRITON[code]


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_every_code_round_trips_over_grpc(code):
    error = error_from_code(code, "why")
    back = error_from_grpc(grpc_status(error), "why")
    assert type(back) is type(error) and back.code is code and back.message == "why"


# HTTP folds UNKNOWN, INVALID_ARG, ALREADY_EXISTS and CANCELLED into 400
_HTTP_BACK = {ErrorCode.UNKNOWN: InvalidArgumentError, ErrorCode.ALREADY_EXISTS:
              InvalidArgumentError, ErrorCode.CANCELLED: InvalidArgumentError}


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_every_code_round_trips_over_http(code):
    error = error_from_code(code, "why")
    back = error_from_http(http_status(error), "why")
    assert type(back) is _HTTP_BACK.get(code, type(error))
    assert back.message == "why"


@pytest.mark.parametrize(("status", "expected"), [
    (401, InvalidArgumentError), (413, InvalidArgumentError), (502, UnavailableError),
    (504, UnavailableError)])
def test_http_statuses_triton_never_sends(status, expected):
    assert type(error_from_http(status, "x")) is expected


@pytest.mark.parametrize(("code", "expected"), [
    (grpc.StatusCode.DEADLINE_EXCEEDED, UnavailableError),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, UnavailableError),
    (grpc.StatusCode.OUT_OF_RANGE, InvalidArgumentError),
    (grpc.StatusCode.FAILED_PRECONDITION, InvalidArgumentError),
    (grpc.StatusCode.DATA_LOSS, UnknownError),
    (None, UnknownError)])
def test_grpc_codes_triton_never_sends(code, expected):
    assert type(error_from_grpc(code, "x")) is expected


def test_untyped_exceptions_are_internal_and_typed_ones_kept():
    kept = NotFoundError("gone")
    assert as_triton_error(kept) is kept
    error = as_triton_error(ZeroDivisionError("boom"))
    assert isinstance(error, InternalError) and error.message == "ZeroDivisionError: boom"

