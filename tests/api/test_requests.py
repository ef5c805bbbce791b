"""Request objects: model.create_request(), inputs and outputs set on it, reuse."""

from __future__ import annotations

import asyncio
import json
import struct

import numpy as np
import pytest
import torch
from sample_models import install_gate

from infercore import (
    DataType,
    InferenceRequest,
    InvalidArgumentError,
    Server,
    serialize_bytes_tensor,
)

ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ], optional: true },
        { name: "Y", data_type: TYPE_STRING, dims: [ -1 ], optional: true } ]
output [ { name: "INFO", data_type: TYPE_STRING, dims: [ 1 ] },
         { name: "X_OUT", data_type: TYPE_FP32, dims: [ -1 ] },
         { name: "Y_OUT", data_type: TYPE_STRING, dims: [ -1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

# Reports what the model saw of the request, and echoes its inputs.
ECHO_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            info = {"id": request.request_id(), "correlation_id": request.correlation_id(),
                    "flags": request.flags(), "timeout": request.timeout(),
                    "parameters": json.loads(request.parameters()),
                    "inputs": sorted(t.name() for t in request.inputs())}
            outputs = [pb_utils.Tensor("INFO", np.array([json.dumps(info).encode()],
                                                        dtype=np.object_))]
            for name in ("X", "Y"):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor(name + "_OUT", tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

GATED_PY = """
import api_requests_gate as gate
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        gate.entered.set()
        gate.release.wait(60)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("X_OUT",
                                                                         x.as_numpy())]))
        return responses
"""

GATED_CONFIG = """
name: "gated"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "X_OUT", data_type: TYPE_FP32, dims: [ -1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""


@pytest.fixture
def gate(monkeypatch):
    module = install_gate(monkeypatch, "api_requests_gate")
    yield module
    module.release.set()


@pytest.fixture
def server(add_sub_repo, gate):
    add_sub_repo.add_model("echo", config=ECHO_CONFIG, model_py=ECHO_PY)
    add_sub_repo.add_model("gated", config=GATED_CONFIG, model_py=GATED_PY)
    with Server(model_repository=add_sub_repo.path) as running:
        yield running


def info_of(response) -> dict:
    return json.loads(response.outputs["INFO"].to_bytes_array()[0])


def test_create_request_fields_reach_the_model(server):
    model = server.model("echo")
    request = model.create_request(request_id="req-1", correlation_id=42, timeout=5_000_000,
                                   parameters={"temperature": 0.5, "greedy": True},
                                   sequence_start=True, sequence_end=True)
    assert isinstance(request, InferenceRequest)
    assert (request.model_name, request.model_version) == ("echo", -1)
    request.set_parameter("mode", "fast")
    request.add_input("X", np.array([1.0, 2.0], np.float32))
    response = model.infer(request).result()
    info = info_of(response)
    assert info["id"] == "req-1" and info["correlation_id"] == 42
    assert info["timeout"] == 5_000_000
    assert info["flags"] == 3  # SEQUENCE_START | SEQUENCE_END
    assert info["parameters"] == {"temperature": 0.5, "greedy": True, "mode": "fast"}
    assert response.request_id == "req-1"
    assert (response.model, response.model_version) == ("echo", 1)
    assert response.final and response.error is None


def test_string_correlation_id_and_priority(server):
    model = server.model("echo")
    request = InferenceRequest(model, correlation_id="session-7", priority=1)
    request.add_input("X", np.zeros(1, np.float32))
    assert info_of(model.infer(request).result())["correlation_id"] == "session-7"
    assert request.priority == 1


@pytest.mark.parametrize("field, value", [
    ("correlation_id", 1.5), ("correlation_id", True), ("correlation_id", -1),
    ("priority", -1), ("timeout", -5), ("timeout", "10"),
])
def test_invalid_fields_are_refused_when_set(server, field, value):
    with pytest.raises(InvalidArgumentError, match=field):
        server.model("echo").create_request(**{field: value})


def test_parameter_values_must_be_scalars(server):
    request = server.model("echo").create_request()
    with pytest.raises(InvalidArgumentError, match="parameter 'bad'"):
        request.set_parameter("bad", [1, 2])


def test_inputs_from_numpy_dlpack_lists_and_raw_bytes(server):
    model = server.model("echo")
    request = model.create_request()
    request.add_input("X", torch.tensor([1.0, 2.0, 3.0]))  # a DLPack producer
    request.add_input("Y", [b"a", b"bc"])
    response = model.infer(request).result()
    assert response.outputs["X_OUT"].to_numpy().tolist() == [1.0, 2.0, 3.0]
    assert response.outputs["Y_OUT"].to_bytes_array().tolist() == [b"a", b"bc"]

    request.add_input_bytes("X", struct.pack("<3f", 4.0, 5.0, 6.0), [3], "FP32")
    request.add_input_bytes("Y", serialize_bytes_tensor([b"xyz"]), [1], DataType.BYTES)
    response = model.infer(request).result()
    assert response.outputs["X_OUT"].to_numpy().tolist() == [4.0, 5.0, 6.0]
    assert response.outputs["Y_OUT"].to_bytes_array().tolist() == [b"xyz"]

    request.remove_all_inputs()
    request.add_input("X", [7, 8])  # a list takes the model's datatype (FP32)
    response = model.infer(request).result()
    assert response.outputs["X_OUT"].to_numpy().dtype == np.float32


def test_raw_bytes_of_the_wrong_size_are_refused(server):
    request = server.model("echo").create_request()
    with pytest.raises(InvalidArgumentError, match="input 'X' has 8 bytes, but shape"):
        request.add_input_bytes("X", b"\0" * 8, [3], "FP32")
    with pytest.raises(InvalidArgumentError, match="elements"):
        request.add_input_bytes("Y", serialize_bytes_tensor([b"a"]), [2], "BYTES")
    with pytest.raises(InvalidArgumentError, match="datatype"):
        request.add_input_bytes("X", b"\0" * 4, [1], "FLOAT")


def test_remove_one_or_all_inputs(server):
    model = server.model("add_sub")
    a = np.ones((1, 4), np.float32)
    request = model.create_request(inputs={"INPUT0": a, "INPUT1": a})
    request.remove_input("INPUT1")
    assert list(request.inputs) == ["INPUT0"]
    with pytest.raises(InvalidArgumentError, match="INPUT1"):
        model.infer(request)
    assert not request.in_flight  # refused on entry: free to fix and resubmit
    with pytest.raises(InvalidArgumentError, match="no input 'INPUT1'"):
        request.remove_input("INPUT1")
    request.remove_all_inputs()
    assert not request.inputs
    request.add_input("INPUT0", a)
    request.add_input("INPUT1", a)
    assert model.infer(request).result().outputs["OUTPUT0"].to_numpy().tolist() == [[2.0] * 4]


def test_request_only_some_outputs(server):
    model = server.model("add_sub")
    a = np.ones((1, 4), np.float32)
    request = model.create_request(inputs={"INPUT0": a, "INPUT1": a}, outputs=["OUTPUT1"])
    assert request.requested_outputs == ("OUTPUT1",)
    assert list(model.infer(request).result().outputs) == ["OUTPUT1"]
    request.add_requested_output("OUTPUT0")
    request.remove_requested_output("OUTPUT1")
    assert list(model.infer(request).result().outputs) == ["OUTPUT0"]
    request.remove_all_requested_outputs()
    assert request.requested_outputs is None
    assert sorted(model.infer(request).result().outputs) == ["OUTPUT0", "OUTPUT1"]
    with pytest.raises(InvalidArgumentError, match="does not request output 'OUTPUT9'"):
        request.remove_requested_output("OUTPUT9")


def test_a_request_is_reused_with_new_inputs(server):
    model = server.model("echo")
    request = model.create_request(request_id="again")
    for value in range(3):
        request.add_input("X", np.full(2, value, np.float32))
        response = model.infer(inference_request=request).result()
        assert response.outputs["X_OUT"].to_numpy().tolist() == [value, value]
        assert not request.in_flight


def test_reuse_while_in_flight_is_an_error_and_the_server_keeps_serving(server, gate):
    model = server.model("gated")
    request = model.create_request(request_id="busy",
                                   inputs={"X": np.ones(2, np.float32)})
    stream = model.infer(request)
    assert gate.entered.wait(30)
    assert request.in_flight
    with pytest.raises(InvalidArgumentError, match="'busy' for model 'gated' is still in"):
        model.infer(request)
    gate.release.set()
    assert stream.result(timeout=30).outputs["X_OUT"].to_numpy().tolist() == [1.0, 1.0]
    assert not request.in_flight
    assert model.infer(request).result(timeout=30) is not None  # reusable again


def test_a_request_is_refused_by_another_model(server):
    request = server.model("echo").create_request(inputs={"X": np.ones(1, np.float32)})
    with pytest.raises(InvalidArgumentError, match="submitted to model 'add_sub'"):
        server.model("add_sub").infer(request)
    assert not request.in_flight


def test_async_infer_takes_a_request(server):
    model = server.model("echo")
    request = model.create_request(inputs={"X": np.ones(3, np.float32)})

    async def main():
        first = await model.async_infer(request)
        responses = [r async for r in model.async_infer(request)]
        return first, responses

    first, responses = asyncio.run(main())
    assert first.outputs["X_OUT"].to_numpy().tolist() == [1.0] * 3
    assert len(responses) == 1 and responses[0].final


def test_request_repr_is_short(server):
    request = server.model("echo").create_request(request_id="r")
    request.add_input("X", np.zeros(1000, np.float32))
    assert repr(request) == "InferenceRequest(model='echo', version=-1, id='r')"
