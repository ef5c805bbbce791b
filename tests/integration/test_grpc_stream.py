"""ModelStreamInfer over a real server: several requests per stream, decoupled models,
errors in-band, cancellation, with tritonclient's stream API and the raw stub."""

from __future__ import annotations

import asyncio
import queue
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

pytest_plugins = ["conftest_grpc"]


@pytest.fixture(scope="module")
def stub(grpc_server):
    with grpc.insecure_channel(grpc_server.url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def add_sub_request(request_id: str, value: float = 1.0) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_sub", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.full(4, value, np.float32).tobytes())
    return request


def counter_request(request_id: str, count: int, *, empty_final: bool = False
                    ) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="counter", id=request_id)
    request.inputs.add(name="COUNT", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([count], np.int32).tobytes())
    if empty_final:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def slow_request(request_id: str, seconds: float) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="slow", id=request_id)
    request.inputs.add(name="SECONDS", datatype="FP32", shape=[1])
    request.raw_input_contents.append(np.array([seconds], np.float32).tobytes())
    return request


def final_flag(response: service_pb2.ModelStreamInferResponse) -> bool:
    return response.infer_response.parameters["triton_final_response"].bool_param


def test_many_requests_share_one_stream_and_come_back_in_order(stub):
    requests = [add_sub_request(f"r{i}", float(i)) for i in range(30)]
    responses = list(stub.ModelStreamInfer(iter(requests), timeout=30))
    assert [r.infer_response.id for r in responses] == [f"r{i}" for i in range(30)]
    for i, response in enumerate(responses):
        assert response.error_message == ""
        assert final_flag(response) is True
        out = np.frombuffer(response.infer_response.raw_output_contents[0], np.float32)
        np.testing.assert_array_equal(out, np.full(4, 2.0 * i))


def test_a_slow_request_is_answered_before_the_quick_one_sent_after_it(stub):
    responses = list(stub.ModelStreamInfer(
        iter([slow_request("slow", 0.3), add_sub_request("quick")]), timeout=30))
    assert [r.infer_response.id for r in responses] == ["slow", "quick"]


def test_errors_travel_in_band_and_the_stream_goes_on(stub):
    unknown = add_sub_request("bad-model")
    unknown.model_name = "no_such_model"
    wrong = add_sub_request("bad-shape")
    wrong.inputs[0].shape[:] = [1, 3]
    malformed_version = add_sub_request("bad-version")
    malformed_version.model_version = "one"
    requests = [add_sub_request("ok-1"), unknown, wrong, malformed_version,
                add_sub_request("ok-2")]
    responses = list(stub.ModelStreamInfer(iter(requests), timeout=30))
    assert [r.infer_response.id for r in responses] == [
        "ok-1", "bad-model", "bad-shape", "bad-version", "ok-2"]
    assert responses[0].error_message == "" and responses[4].error_message == ""
    assert responses[1].error_message == "Request for unknown model: 'no_such_model' is not found"
    assert responses[2].error_message.startswith(
        "[request id: bad-shape] unexpected shape for input 'INPUT0' for model 'add_sub'")
    assert "failed to get model version" in responses[3].error_message


def test_decoupled_models_stream_several_responses_per_request(stub):
    responses = list(stub.ModelStreamInfer(
        iter([counter_request("three", 3), counter_request("none", 0)]), timeout=30))
    mine = [r for r in responses if r.infer_response.id == "three"]
    assert len(mine) == 3 and len(responses) == 3  # "none" ends with a bare final flag only
    indices = [int(np.frombuffer(r.infer_response.raw_output_contents[0], np.int32)[0])
               for r in mine]
    assert indices == [0, 1, 2]
    assert [final_flag(r) for r in mine] == [False, False, False]


def test_an_empty_final_response_is_sent_only_when_asked_for(stub):
    responses = list(stub.ModelStreamInfer(
        iter([counter_request("c", 2, empty_final=True)]), timeout=30))
    assert [final_flag(r) for r in responses] == [False, False, True]
    last = responses[-1].infer_response
    assert last.id == "c" and last.model_name == "counter"
    assert len(last.outputs) == 0 and responses[-1].error_message == ""


def test_a_decoupled_error_response_does_not_end_the_request_or_the_stream(stub):
    responses = list(stub.ModelStreamInfer(
        iter([counter_request("neg", -1), add_sub_request("after")]), timeout=30))
    by_id: dict[str, list[service_pb2.ModelStreamInferResponse]] = {}
    for response in responses:
        by_id.setdefault(response.infer_response.id, []).append(response)
    errors = [r for r in by_id["neg"] if r.error_message]
    assert [r.error_message for r in errors] == ["negative count"]
    assert len(by_id["neg"]) == 2 and by_id["after"][0].error_message == ""


def test_the_triton_grpc_error_header_ends_the_stream_at_a_failed_response(stub):
    header = (("triton_grpc_error", "true"),)
    # A request that cannot start is still answered in-band, as Triton does ...
    unknown = add_sub_request("bad")
    unknown.model_name = "no_such_model"
    responses = list(stub.ModelStreamInfer(
        iter([add_sub_request("ok"), unknown, add_sub_request("x")]), timeout=30,
        metadata=header))
    assert [r.infer_response.id for r in responses] == ["ok", "bad", "x"]
    assert responses[1].error_message == "Request for unknown model: 'no_such_model' is not found"
    # ... and a response that fails ends the stream with its status.
    call = stub.ModelStreamInfer(iter([counter_request("fails", -1)]), timeout=30,
                                 metadata=header)
    with pytest.raises(grpc.RpcError) as raised:
        list(call)
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    assert raised.value.details() == "negative count"


def test_tritonclient_stream_api_matches_responses_by_id(grpc_server):
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(grpc_server.url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for i in range(5):
                a = np.full((1, 4), i, np.float32)
                inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"),
                          grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
                inputs[0].set_data_from_numpy(a)
                inputs[1].set_data_from_numpy(a)
                client.async_stream_infer("add_sub", inputs, request_id=f"s{i}")
            count = grpcclient.InferInput("COUNT", [1], "INT32")
            count.set_data_from_numpy(np.array([2], np.int32))
            client.async_stream_infer("counter", [count], request_id="dec",
                                      enable_empty_final_response=True)
            got = [results.get(timeout=10) for _ in range(8)]
        finally:
            client.stop_stream()
    assert all(error is None for _, error in got)
    ids = [result.get_response().id for result, _ in got]
    assert sorted(ids) == sorted([f"s{i}" for i in range(5)] + ["dec"] * 3)
    for result, _ in got:
        response = result.get_response()
        if response.id.startswith("s"):
            i = int(response.id[1:])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"),
                                          np.full((1, 4), 2 * i, np.float32))


async def test_the_asyncio_client_streams(grpc_server):
    all_seen = asyncio.Event()

    async def requests():
        for i in range(4):
            a = np.full((1, 4), i, np.float32)
            inputs = [aioclient.InferInput("INPUT0", [1, 4], "FP32"),
                      aioclient.InferInput("INPUT1", [1, 4], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(a)
            yield {"model_name": "add_sub", "inputs": inputs, "request_id": f"a{i}"}
        count = aioclient.InferInput("COUNT", [1], "INT32")
        count.set_data_from_numpy(np.array([-1], np.int32))
        yield {"model_name": "counter", "inputs": [count], "request_id": "neg"}
        # Keep the stream open until every answer arrived: the client ends the call when
        # this generator ends, and answers still on the way would be lost.
        await asyncio.wait_for(all_seen.wait(), 30)

    async with aioclient.InferenceServerClient(grpc_server.url) as client:
        seen = []
        async for result, error in client.stream_infer(requests()):
            seen.append((result, error))
            if len(seen) == 6:  # a0..a3, and the counter's error and its one INDEX
                all_seen.set()
                break
    ids = [r.get_response().id for r, e in seen if e is None]
    # Responses of different requests may interleave (the counter's can overtake a3).
    assert sorted(ids) == ["a0", "a1", "a2", "a3", "neg"]
    errors = [e for r, e in seen if e is not None]
    assert len(errors) == 1 and "negative count" in str(errors[0])


def _slow_failures(client: grpcclient.InferenceServerClient) -> int:
    """Requests of "slow" that ended: one cancelled while queued fails; one cancelled while
    it runs gets the model's own error answer, a success as Triton's Python backend
    counts it."""
    stats = client.get_inference_statistics("slow").model_stats[0]
    return stats.inference_stats.success.count + stats.inference_stats.fail.count


def test_cancelling_a_stream_cancels_its_requests_and_the_server_keeps_serving(grpc_server):
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(grpc_server.url) as client:
        before = _slow_failures(client)
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        seconds = grpcclient.InferInput("SECONDS", [1], "FP32")
        seconds.set_data_from_numpy(np.array([20.0], np.float32))
        client.async_stream_infer("slow", [seconds], request_id="long-1")
        client.async_stream_infer("slow", [seconds], request_id="long-2")
        # A decoupled request is answered at once, not after the slow ones: once it is,
        # the server has read and started both slow requests.
        count = grpcclient.InferInput("COUNT", [1], "INT32")
        count.set_data_from_numpy(np.array([1], np.int32))
        client.async_stream_infer("counter", [count], request_id="marker")
        result, error = results.get(timeout=10)
        assert error is None and result.get_response().id == "marker"
        started = time.monotonic()
        client.stop_stream(cancel_requests=True)
        deadline = time.monotonic() + 10
        while _slow_failures(client) < before + 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # the server process counts the cancelled requests
        assert _slow_failures(client) == before + 2
        assert time.monotonic() - started < 5  # not the 20 s the requests asked for
        a = np.ones((1, 4), np.float32)
        inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"),
                  grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
