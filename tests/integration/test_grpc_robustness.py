"""Bad clients against a real server: malformed and oversized messages, abandoned streams,
shutdown with work in flight. After each, the server goes on serving, and it stops with
no task or request left behind."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from infercore import deserialize_bytes_tensor

pytest_plugins = ["conftest_grpc"]

LIMIT = 256 * 1024  # the --grpc-max-message-size of this module's server


@pytest.fixture(scope="module")
def limited_server(grpc_serve):
    """A server with a small message limit, and every connection flag set."""
    return grpc_serve("--grpc-max-message-size", str(LIMIT), "--exit-timeout-secs", "1",
                      "--grpc-keepalive-time", "10000", "--grpc-keepalive-timeout", "5000",
                      "--grpc-keepalive-permit-without-calls", "true",
                      "--grpc-http2-max-pings-without-data", "0",
                      "--grpc-http2-min-recv-ping-interval-without-data", "5000",
                      "--grpc-http2-max-ping-strikes", "0", "--grpc-max-connection-age",
                      "600000", "--grpc-max-connection-age-grace", "5000",
                      "--grpc-header-forward-pattern", "^x-trace", "--reuse-grpc-port", "false",
                      "--grpc-infer-allocation-pool-size", "16")


@pytest.fixture
def stub(limited_server) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(limited_server.url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def add_sub_request(request_id: str = "") -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_sub", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    return request


def assert_serving(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    response = stub.ModelInfer(add_sub_request("check"), timeout=10)
    assert response.id == "check"
    assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [2.0] * 4


def test_matching_headers_are_forwarded_as_request_parameters(stub):
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="X", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    response = stub.ModelInfer(request, timeout=10,
                               metadata=(("x-trace-id", "abc"), ("x-other", "no")))
    seen = json.loads(deserialize_bytes_tensor(response.raw_output_contents[0])[0])
    assert seen["parameters"] == {"x-trace-id": "abc"}


def test_a_malformed_infer_request_is_invalid_argument(limited_server, stub):
    with grpc.insecure_channel(limited_server.url) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as raised:
            infer(b"\x0a\xff\xff\xff\xff\x0f", timeout=10)  # a length running past the end
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith("failed to parse the inference request")
    assert_serving(stub)


def test_malformed_messages_to_other_rpcs_fail_cleanly(limited_server, stub):
    with grpc.insecure_channel(limited_server.url) as channel:
        metadata = channel.unary_unary("/inference.GRPCInferenceService/ModelMetadata")
        with pytest.raises(grpc.RpcError) as raised:
            metadata(b"\x0a\xff\xff\xff\xff\x0f", timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith("failed to parse the request")
    assert_serving(stub)


def test_unknown_methods_are_unimplemented(limited_server, stub):
    with grpc.insecure_channel(limited_server.url) as channel:
        bogus = channel.unary_unary("/inference.GRPCInferenceService/ModelTeleport")
        with pytest.raises(grpc.RpcError) as raised:
            bogus(b"", timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert_serving(stub)


def test_a_malformed_stream_message_is_answered_in_band(limited_server, stub):
    with grpc.insecure_channel(limited_server.url) as channel:
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                       response_deserializer=service_pb2.ModelStreamInferResponse
                                       .FromString)
        requests = [add_sub_request("before").SerializeToString(), b"\x0a\xff\xff\xff\x0f",
                    add_sub_request("after").SerializeToString()]
        responses = list(stream(iter(requests), timeout=10))
    assert [r.infer_response.id for r in responses] == ["before", "", "after"]
    assert responses[1].error_message.startswith("failed to parse the inference request")
    assert responses[2].error_message == ""


def test_oversized_messages_are_refused_and_the_server_goes_on(limited_server, stub):
    big = service_pb2.ModelInferRequest(model_name="mirror")
    data = np.zeros(LIMIT // 4 + 16, np.float32)
    big.inputs.add(name="IN_FP32", datatype="FP32", shape=[data.size])
    big.raw_input_contents.append(data.tobytes())
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(big, timeout=10)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_serving(stub)
    client = grpcclient.InferenceServerClient(limited_server.url)
    tensor = grpcclient.InferInput("IN_FP32", [data.size], "FP32")
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as failure:
        client.infer("mirror", [tensor])
    assert failure.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    client.close()


def _slow_failures(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> int:
    """Requests of "slow" that ended: one cancelled while queued fails; one cancelled while
    it runs gets the model's own error answer, a success as Triton's Python backend
    counts it."""
    stats = stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name="slow"))
    inference = stats.model_stats[0].inference_stats
    return inference.success.count + inference.fail.count


def test_an_abandoned_stream_cancels_its_requests_and_the_server_goes_on(limited_server, stub):
    before = _slow_failures(stub)
    channel = grpc.insecure_channel(limited_server.url)
    outgoing: queue.Queue = queue.Queue()
    stream = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(
        iter(outgoing.get, None))
    for i in range(3):
        request = service_pb2.ModelInferRequest(model_name="slow", id=f"slow-{i}")
        request.inputs.add(name="SECONDS", datatype="FP32", shape=[1])
        request.raw_input_contents.append(np.array([30.0], np.float32).tobytes())
        outgoing.put(request)
    marker = service_pb2.ModelInferRequest(model_name="counter", id="marker")
    marker.inputs.add(name="COUNT", datatype="INT32", shape=[1])
    marker.raw_input_contents.append(np.array([1], np.int32).tobytes())
    outgoing.put(marker)
    assert next(stream).infer_response.id == "marker"  # the slow ones are running now
    channel.close()  # gone without half-closing the stream or cancelling anything
    deadline = time.monotonic() + 10
    while _slow_failures(stub) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.02)  # the server process counts the cancelled requests
    assert _slow_failures(stub) == before + 3
    assert_serving(stub)


def test_shutdown_cancels_work_in_flight_and_leaves_nothing_behind(limited_server):
    channel = grpc.insecure_channel(limited_server.url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = service_pb2.ModelInferRequest(model_name="slow", id="long")
    request.inputs.add(name="SECONDS", datatype="FP32", shape=[1])
    request.raw_input_contents.append(np.array([60.0], np.float32).tobytes())
    pending = stub.ModelInfer.future(request)
    marker = service_pb2.ModelInferRequest(model_name="counter", id="marker")
    marker.inputs.add(name="COUNT", datatype="INT32", shape=[1])
    marker.raw_input_contents.append(np.array([1], np.int32).tobytes())
    open_stream = stub.ModelStreamInfer(iter([marker]))
    assert next(open_stream).infer_response.id == "marker"
    started = time.monotonic()
    code = limited_server.stop()
    assert code == 0
    assert time.monotonic() - started < 10  # the exit timeout is 1 s, not the 60 s asked
    with pytest.raises(grpc.RpcError):
        pending.result(timeout=10)
    channel.close()
    log = limited_server.log()
    for leak in ("Task was destroyed but it is pending", "Task exception was never retrieved",
                 "Traceback"):
        assert leak not in log, log
