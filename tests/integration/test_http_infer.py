"""Inference over HTTP against a real ``infercore serve``, driven by tritonclient.http."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

pytest_plugins = ["conftest_http"]

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16, "BYTES": np.object_,
}


def _sample(datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        return np.array([b"alpha", b"", "\u00e9t\u00e9".encode(), b"z" * 40], dtype=np.object_)
    if datatype == "BOOL":
        return np.array([True, False, True, True])
    info = np.iinfo(NUMPY[datatype]) if datatype[0] in "UI" else None
    if info is not None:  # the extremes survive the trip
        return np.array([info.min, 0, 7, info.max], dtype=NUMPY[datatype])
    return np.array([-1.5, 0.0, 0.25, 1024.0], dtype=NUMPY[datatype])


@pytest.fixture(scope="module")
def client(http_server):
    with httpclient.InferenceServerClient(http_server.url) as client:
        yield client


def _add_sub_inputs(binary: bool = True) -> list[httpclient.InferInput]:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [2, 4], "FP32"),
              httpclient.InferInput("INPUT1", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


@pytest.mark.parametrize("binary_in", [True, False], ids=["binary-in", "json-in"])
@pytest.mark.parametrize("binary_out", [True, False], ids=["binary-out", "json-out"])
def test_add_sub_answers_in_every_tensor_format(client, binary_in, binary_out):
    outputs = [httpclient.InferRequestedOutput(name, binary_data=binary_out)
               for name in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add_sub", _add_sub_inputs(binary_in), outputs=outputs)

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)
    assert result.get_response()["model_version"] == "1"


@pytest.mark.parametrize("datatype", list(NUMPY))
def test_every_datatype_round_trips_as_binary_data(client, datatype):
    data = _sample(datatype)
    tensor = httpclient.InferInput(f"IN_{datatype}", list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=True)
    out = httpclient.InferRequestedOutput(f"OUT_{datatype}", binary_data=True)

    result = client.infer("identity", [tensor], outputs=[out])

    got = result.as_numpy(f"OUT_{datatype}")
    assert got.dtype == np.dtype(NUMPY[datatype])
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("datatype", [t for t in NUMPY if t not in ("BF16", "FP16")])
def test_every_datatype_round_trips_as_json(client, datatype):
    data = _sample(datatype)
    tensor = httpclient.InferInput(f"IN_{datatype}", list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=False)
    out = httpclient.InferRequestedOutput(f"OUT_{datatype}", binary_data=False)

    result = client.infer("identity", [tensor], outputs=[out])

    got = result.as_numpy(f"OUT_{datatype}")
    if datatype == "BYTES":  # JSON carries text: tritonclient hands back str objects
        got = np.array([s.encode() for s in got], dtype=np.object_)
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_json_data_is_refused_as_triton_refuses_it(http_server, datatype):
    import http.client

    body = {"inputs": [{"name": f"IN_{datatype}", "shape": [2], "datatype": datatype,
                        "data": [1.5, -2.0]}]}
    conn = http.client.HTTPConnection("127.0.0.1", http_server.port, timeout=10)
    conn.request("POST", "/v2/models/identity/infer", json.dumps(body))
    response = conn.getresponse()

    assert response.status == 400
    assert json.loads(response.read()) == {"error": (
        f"receiving {datatype} data via JSON is not supported. Please use the binary data "
        f"format for input IN_{datatype}")}


def test_binary_data_output_parameter_makes_every_output_binary(client):
    # With no outputs named, tritonclient sends "binary_data_output": true.
    result = client.infer("add_sub", _add_sub_inputs())

    outputs = result.get_response()["outputs"]
    assert all(o["parameters"]["binary_data_size"] == 32 for o in outputs)
    assert result.as_numpy("OUTPUT0").shape == (2, 4)


def test_only_requested_outputs_come_back(client):
    result = client.infer("add_sub", _add_sub_inputs(),
                          outputs=[httpclient.InferRequestedOutput("OUTPUT1")])

    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None


def test_classification_returns_top_k_with_labels(client):
    scores = np.array([[0.1, 0.7, 0.05, 0.9, 0.2], [0.3, 0.1, 0.2, 0.0, 0.4]], np.float32)
    tensor = httpclient.InferInput("SCORES", [2, 5], "FP32")
    tensor.set_data_from_numpy(scores)
    outputs = [httpclient.InferRequestedOutput("PROBS", class_count=2),
               httpclient.InferRequestedOutput("COUNTS", binary_data=False, class_count=3)]

    result = client.infer("classifier", [tensor], outputs=outputs)

    assert result.as_numpy("PROBS").tolist() == [
        [b"0.900000:3:fish", b"0.700000:1:dog"], [b"0.400000:4:frog", b"0.300000:0:cat"]]
    counts = result.get_output("COUNTS")
    assert counts["datatype"] == "BYTES" and counts["shape"] == [2, 3]
    assert counts["data"][:3] == ["9:3", "7:1", "2:4"]  # integers print as integers


def test_request_parameters_reach_the_model_and_response_parameters_come_back(client):
    tensor = httpclient.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))

    result = client.infer("echo", [tensor], request_id="req-7", sequence_id=42,
                          sequence_start=True, sequence_end=True, priority=3, timeout=900,
                          parameters={"custom": "yes", "n": 5, "flag": False, "ratio": 0.5})

    info = json.loads(result.as_numpy("INFO")[0])
    assert info["parameters"] == {"custom": "yes", "n": 5, "flag": False, "ratio": 0.5}
    assert info["correlation_id"] == 42
    assert info["flags"] == 3  # SEQUENCE_START | SEQUENCE_END
    assert info["timeout"] == 900
    assert info["request_id"] == "req-7"
    response = result.get_response()
    assert response["id"] == "req-7"
    assert response["parameters"] == {"echoed": True, "count": 1, "note": "hi"}


def test_headers_matching_the_forward_pattern_become_request_parameters(client):
    tensor = httpclient.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))

    result = client.infer("echo", [tensor], headers={"x-fwd-tenant": "blue",
                                                     "x-other": "no"})

    parameters = json.loads(result.as_numpy("INFO")[0])["parameters"]
    assert parameters == {"x-fwd-tenant": "blue"}


def test_string_sequence_id_is_the_correlation_id(client):
    tensor = httpclient.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))

    result = client.infer("echo", [tensor], sequence_id="session-a")

    assert json.loads(result.as_numpy("INFO")[0])["correlation_id"] == "session-a"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_and_responses(client, algorithm):
    result = client.infer("add_sub", _add_sub_inputs(),
                          request_compression_algorithm=algorithm,
                          response_compression_algorithm=algorithm)

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)


def test_system_shared_memory_carries_inputs_and_outputs(client):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 2, dtype=np.float32)
    key = f"/infercore_test_{id(client)}"
    region = shm.create_shared_memory_region("io", key, 4 * a.nbytes)
    try:
        shm.set_shared_memory_region(region, [a, b])
        client.register_system_shared_memory("io", key, 4 * a.nbytes)
        inputs = [httpclient.InferInput("INPUT0", [2, 4], "FP32"),
                  httpclient.InferInput("INPUT1", [2, 4], "FP32")]
        inputs[0].set_shared_memory("io", a.nbytes)
        inputs[1].set_shared_memory("io", b.nbytes, offset=a.nbytes)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0"),
                   httpclient.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("io", a.nbytes, offset=2 * a.nbytes)
        outputs[1].set_shared_memory("io", a.nbytes, offset=3 * a.nbytes)

        result = client.infer("add_sub", inputs, outputs=outputs)

        entry = result.get_output("OUTPUT0")
        assert entry == {"name": "OUTPUT0", "datatype": "FP32", "shape": [2, 4]}
        sums = shm.get_contents_as_numpy(region, np.float32, [2, 4], offset=2 * a.nbytes)
        diffs = shm.get_contents_as_numpy(region, np.float32, [2, 4], offset=3 * a.nbytes)
        np.testing.assert_array_equal(sums, a + b)
        np.testing.assert_array_equal(diffs, a - b)
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)


def test_output_too_large_for_its_shared_memory_region_is_an_error(client):
    key = f"/infercore_small_{id(client)}"
    region = shm.create_shared_memory_region("small", key, 16)
    try:
        client.register_system_shared_memory("small", key, 16)
        output = httpclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("small", 16)

        with pytest.raises(InferenceServerException) as caught:
            client.infer("add_sub", _add_sub_inputs(), outputs=[output])

        assert ("shared memory size specified with the request for output 'OUTPUT0' "
                "(16 bytes) should be at least 32 bytes to hold the results") in str(caught.value)
    finally:
        client.unregister_system_shared_memory("small")
        shm.destroy_shared_memory_region(region)


def test_decoupled_models_are_refused_over_http(client):
    tensor = httpclient.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))

    with pytest.raises(InferenceServerException, match="doesn't support models with decoupled"):
        client.infer("decoupled", [tensor])


async def test_aio_client_infers_concurrently(http_server):
    import asyncio

    async with aiohttpclient.InferenceServerClient(http_server.url) as client:
        assert await client.is_server_ready()
        results = await asyncio.gather(*(client.infer("add_sub", _add_sub_inputs(i % 2 == 0))
                                          for i in range(20)))
        metadata = await client.get_model_metadata("add_sub")

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    for result in results:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
    assert metadata["name"] == "add_sub"


async def test_aio_client_sees_typed_errors(http_server):
    async with aiohttpclient.InferenceServerClient(http_server.url) as client:
        with pytest.raises(InferenceServerException, match="unknown model"):
            await client.infer("missing", _add_sub_inputs())
