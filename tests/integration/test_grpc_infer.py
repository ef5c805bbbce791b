"""ModelInfer over a real server with tritonclient.grpc (sync and aio), as users call it."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

pytest_plugins = ["conftest_grpc"]

DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
             "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES")  # the mirror model's

NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
         "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
         "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
         "BF16": ml_dtypes.bfloat16}


@pytest.fixture(scope="module")
def client(grpc_server):
    with grpcclient.InferenceServerClient(grpc_server.url) as client:
        yield client


@pytest.fixture(scope="module")
def stub(grpc_server):
    with grpc.insecure_channel(grpc_server.url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"),
              grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _values(datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        return np.array([b"", b"tri\x00ton", "\u00e9t\u00e9".encode()], dtype=np.object_)
    if datatype == "BOOL":
        return np.array([True, False, True])
    return np.array([0, 1, 100], dtype=np.float64).astype(NUMPY[datatype])


def test_add_sub_answers_with_the_request_id_and_both_outputs(client):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), np.float32)
    result = client.infer("add_sub", _inputs(a, b), request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.id == "req-7"
    assert response.model_name == "add_sub" and response.model_version == "1"
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert list(response.outputs[0].shape) == [2, 4]


def test_only_the_requested_outputs_come_back(client):
    a = np.ones((1, 4), np.float32)
    result = client.infer("add_sub", _inputs(a, a), model_version="1",
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 4)))


@pytest.mark.parametrize("datatype", DATATYPES)
def test_every_datatype_travels_raw(client, datatype):
    values = _values(datatype)
    tensor = grpcclient.InferInput(f"IN_{datatype}", list(values.shape), datatype)
    tensor.set_data_from_numpy(values)
    result = client.infer("mirror", [tensor])
    out = result.as_numpy(f"OUT_{datatype}")
    assert result.get_response().outputs[0].datatype == datatype
    if datatype == "BYTES":
        assert list(out) == list(values)
    else:
        np.testing.assert_array_equal(out.astype(np.float64), values.astype(np.float64))


TYPED = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
         "UINT32": "uint_contents", "UINT64": "uint64_contents", "INT8": "int_contents",
         "INT16": "int_contents", "INT32": "int_contents", "INT64": "int64_contents",
         "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}


def _mirror_request(datatype: str, field: str, values: list) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="mirror")
    tensor = request.inputs.add(name=f"IN_{datatype}", datatype=datatype, shape=[len(values)])
    getattr(tensor.contents, field).extend(values)
    return request


@pytest.mark.parametrize("datatype", sorted(TYPED))
def test_typed_contents_are_accepted_for_each_datatype_as_triton_does(stub, datatype):
    values = _values(datatype).tolist()
    response = stub.ModelInfer(_mirror_request(datatype, TYPED[datatype], values))
    output = response.outputs[0]
    assert output.datatype == datatype and list(output.shape) == [3]
    if datatype == "BYTES":
        assert response.raw_output_contents[0] == b"".join(
            len(v).to_bytes(4, "little") + v for v in values)
    else:
        decoded = np.frombuffer(response.raw_output_contents[0], NUMPY[datatype])
        assert decoded.tolist() == values


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_cannot_use_typed_contents(stub, datatype):
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(_mirror_request(datatype, "fp32_contents", [1.0, 2.0]))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == (
        f"unexpected explicit tensor data for input tensor 'IN_{datatype}' for model 'mirror' "
        f"of type 'FP32', expected datatype '{datatype}'")


def test_narrow_integers_keep_the_low_bytes_of_int_contents(stub):
    response = stub.ModelInfer(_mirror_request("INT8", "int_contents", [1, 255, 256 + 7]))
    assert np.frombuffer(response.raw_output_contents[0], np.int8).tolist() == [1, -1, 7]


def test_wrong_byte_size_is_invalid_argument_with_tritons_text(client):
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor._raw_content = b"\x00" * 12  # three floats for a [1, 4] tensor
    other = grpcclient.InferInput("INPUT1", [1, 4], "FP32")
    other.set_data_from_numpy(np.ones((1, 4), np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("add_sub", [tensor, other])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert raised.value.message() == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
        "'add_sub'. Expected 16, got 12")


def test_invalid_shapes_and_types_are_invalid_argument(client):
    wrong = grpcclient.InferInput("INPUT0", [1, 4], "INT32")
    wrong.set_data_from_numpy(np.ones((1, 4), np.int32))
    ok = grpcclient.InferInput("INPUT1", [1, 4], "FP32")
    ok.set_data_from_numpy(np.ones((1, 4), np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("add_sub", [wrong, ok])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "data-type is 'INT32', but model 'add_sub' expects 'FP32'" in raised.value.message()
    with pytest.raises(InferenceServerException) as raised:
        client.infer("add_sub", [ok])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "missing required input(s) ['INPUT0']" in raised.value.message()


def test_unknown_models_and_versions_are_not_found(client):
    a = np.ones((1, 4), np.float32)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("no_such_model", _inputs(a, a))
    assert raised.value.status() == "StatusCode.NOT_FOUND"
    assert raised.value.message() == "Request for unknown model: 'no_such_model' is not found"
    with pytest.raises(InferenceServerException) as raised:
        client.infer("add_sub", _inputs(a, a), model_version="9")
    assert raised.value.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")
    with pytest.raises(InferenceServerException) as raised:
        client.infer("add_sub", _inputs(a, a), model_version="x1")
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_decoupled_models_are_refused_by_model_infer(client):
    count = grpcclient.InferInput("COUNT", [1], "INT32")
    count.set_data_from_numpy(np.array([2], np.int32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("counter", [count])
    assert raised.value.status() == "StatusCode.UNIMPLEMENTED"
    assert raised.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy")


def test_request_parameters_reach_the_model_and_response_parameters_come_back(client):
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    result = client.infer("echo", [x], request_id="e1", sequence_id=42, sequence_start=True,
                          priority=3, timeout=5_000_000,
                          parameters={"name": "n", "on": True, "k": 9, "ratio": 0.5})
    seen = json.loads(result.as_numpy("SEEN")[0])
    assert seen["parameters"] == {"name": "n", "on": True, "k": 9, "ratio": 0.5}
    assert seen["correlation_id"] == 42 and seen["id"] == "e1"
    assert seen["flags"] == 1  # sequence start
    assert seen["timeout"] == 5_000_000
    parameters = result.get_response().parameters
    assert parameters["flag"].bool_param is True
    assert parameters["number"].int64_param == 7
    assert parameters["text"].string_param == "hello"
    result = client.infer("echo", [x], sequence_id="session-a", sequence_end=True)
    seen = json.loads(result.as_numpy("SEEN")[0])
    assert seen["correlation_id"] == "session-a" and seen["flags"] == 2


def test_reserved_and_badly_typed_parameters_are_refused(stub):
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="X", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    request.parameters["triton_secret"].bool_param = True
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reserved for Triton usage" in raised.value.details()
    del request.parameters["triton_secret"]
    request.parameters["priority"].string_param = "high"
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(request)
    assert raised.value.details() == (
        "invalid value type for 'priority' parameter, expected int64_param or uint64_param.")


def test_classification_returns_top_classes_with_labels(client):
    logits = np.array([[0.1, 0.7, 0.05, 0.15], [0.9, 0.0, 0.3, 0.2]], np.float32)
    tensor = grpcclient.InferInput("LOGITS", [2, 4], "FP32")
    tensor.set_data_from_numpy(logits)
    result = client.infer("classifier", [tensor],
                          outputs=[grpcclient.InferRequestedOutput("SCORES", class_count=2)])
    output = result.get_response().outputs[0]
    assert output.datatype == "BYTES" and list(output.shape) == [2, 2]
    classes = result.as_numpy("SCORES")
    assert [item.decode() for item in classes[0]] == ["0.700000:1:banana", "0.150000:3:date"]
    assert [item.decode() for item in classes[1]] == ["0.900000:0:apple", "0.300000:2:cherry"]


def test_inputs_and_outputs_in_system_shared_memory(client):
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    b = np.full((1, 4), 2, np.float32)
    size = a.nbytes
    region = shm.create_shared_memory_region("grpc_io", "/infercore_grpc_io", 4 * size)
    try:
        shm.set_shared_memory_region(region, [a, b])
        client.register_system_shared_memory("grpc_io", "/infercore_grpc_io", 4 * size)
        inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"),
                  grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_shared_memory("grpc_io", size)
        inputs[1].set_shared_memory("grpc_io", size, offset=size)
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0"),
                   grpcclient.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("grpc_io", size, offset=2 * size)
        outputs[1].set_shared_memory("grpc_io", size, offset=3 * size)
        result = client.infer("add_sub", inputs, outputs=outputs)
        assert list(result.get_response().raw_output_contents) == [b"", b""]
        total = shm.get_contents_as_numpy(region, np.float32, [4, 4])
        np.testing.assert_array_equal(total[2], (a + b)[0])
        np.testing.assert_array_equal(total[3], (a - b)[0])
        status = client.get_system_shared_memory_status(region_name="grpc_io")
        assert status.regions["grpc_io"].byte_size == 4 * size
        outputs[0].set_shared_memory("grpc_io", size - 4, offset=2 * size)
        with pytest.raises(InferenceServerException) as raised:
            client.infer("add_sub", inputs, outputs=outputs)
        assert "should be at least 16 bytes to hold the results" in raised.value.message()
    finally:
        client.unregister_system_shared_memory("grpc_io")
        shm.destroy_shared_memory_region(region)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("add_sub", inputs)
    assert raised.value.status() == "StatusCode.NOT_FOUND"
    assert raised.value.message() == "Unable to find shared memory region: 'grpc_io'"


def test_gzip_compressed_requests_are_accepted(client):
    a = np.ones((1, 4), np.float32)
    result = client.infer("add_sub", _inputs(a, a), compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


async def test_the_asyncio_client_infers_concurrently(grpc_server):
    async with aioclient.InferenceServerClient(grpc_server.url) as client:
        assert await client.is_server_ready()

        async def one(i: int):
            a = np.full((1, 4), i, np.float32)
            inputs = [aioclient.InferInput("INPUT0", [1, 4], "FP32"),
                      aioclient.InferInput("INPUT1", [1, 4], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(a)
            result = await client.infer("add_sub", inputs, request_id=str(i))
            return result.get_response().id, result.as_numpy("OUTPUT0")

        results = await asyncio.gather(*(one(i) for i in range(20)))
        for i, (request_id, out) in enumerate(results):
            assert request_id == str(i)
            np.testing.assert_array_equal(out, np.full((1, 4), 2 * i, np.float32))


def test_a_client_deadline_cancels_the_request(client):
    # the model answers its cancelled request with an error of its own: a success, as
    # Triton's Python backend counts it; what matters is that it stopped at once
    def failures() -> int:
        stats = client.get_inference_statistics("slow").model_stats[0]
        return stats.inference_stats.success.count

    before = failures()
    seconds = grpcclient.InferInput("SECONDS", [1], "FP32")
    seconds.set_data_from_numpy(np.array([30.0], np.float32))
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as raised:
        client.infer("slow", [seconds], client_timeout=0.2)
    assert raised.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    deadline = time.monotonic() + 10
    while failures() == before and time.monotonic() < deadline:
        time.sleep(0.02)  # the server process records the cancelled execution
    assert failures() == before + 1
    assert time.monotonic() - started < 5  # the model stopped, it did not run 30 s


def test_a_long_request_does_not_hold_up_short_ones(client):
    # The slow model runs on its instance thread and is answered from there; meanwhile
    # the transport keeps answering add_sub (which runs where the call arrives).
    seconds = grpcclient.InferInput("SECONDS", [1], "FP32")
    seconds.set_data_from_numpy(np.array([60.0], np.float32))
    results: list[object] = []
    call = client.async_infer("slow", [seconds],
                              lambda result, error: results.append(result or error))
    a = np.full((1, 4), 2.0, np.float32)
    for _ in range(20):
        out = client.infer("add_sub", _inputs(a, a)).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, a + a)
    assert results == []  # all twenty were answered while the slow one still ran
    call.cancel()
    deadline = time.monotonic() + 30
    while not results and time.monotonic() < deadline:
        time.sleep(0.02)
    assert isinstance(results[0], InferenceServerException)
    assert results[0].status() == "StatusCode.CANCELLED"
