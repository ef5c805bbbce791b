"""Output allocation: the default allocator, preallocated buffers, a caller's allocator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infercore import (
    DataType,
    InternalError,
    InvalidArgumentError,
    MemoryType,
    Server,
    UnsupportedError,
    deserialize_bytes_tensor,
)

A = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
B = np.array([[0.5, 0.5, 0.5, 0.5]], np.float32)

IDENTITY_BYTES_CONFIG = """
name: "words"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_STRING, dims: [ -1 ] } ]
output [ { name: "OUT", data_type: TYPE_STRING, dims: [ -1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

IDENTITY_BYTES_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""


@pytest.fixture
def server(add_sub_repo):
    add_sub_repo.add_model("words", config=IDENTITY_BYTES_CONFIG, model_py=IDENTITY_BYTES_PY)
    with Server(model_repository=add_sub_repo.path) as running:
        yield running


def add_sub_request(server, **fields):
    return server.model("add_sub").create_request(inputs={"INPUT0": A, "INPUT1": B},
                                                  **fields)


def test_default_allocator_reports_cpu_memory(server):
    response = server.model("add_sub").infer(add_sub_request(server)).result()
    for tensor in response.outputs.values():
        assert tensor.memory_type is MemoryType.CPU
    assert response.outputs["OUTPUT0"].to_numpy().tolist() == (A + B).tolist()


def test_preallocated_numpy_buffer_is_the_responses_tensor(server):
    out0 = np.zeros((1, 4), np.float32)
    request = add_sub_request(server, output_buffers={"OUTPUT0": out0})
    response = server.model("add_sub").infer(request).result()
    assert response.outputs["OUTPUT0"].to_numpy() is out0
    assert out0.tolist() == (A + B).tolist()
    # outputs without a buffer keep the default allocator
    assert response.outputs["OUTPUT1"].to_numpy().tolist() == (A - B).tolist()
    # the buffer is reused on the next submission
    request.add_input("INPUT1", A)
    server.model("add_sub").infer(request).result()
    assert out0.tolist() == (A + A).tolist()


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "torch", "numpy_bytes"])
def test_outputs_land_in_raw_and_dlpack_buffers(server, kind):
    storage = {"bytearray": lambda: bytearray(16),
               "memoryview": lambda: memoryview(bytearray(32)),
               "torch": lambda: torch.zeros(4),
               "numpy_bytes": lambda: np.zeros(64, np.uint8)}[kind]()
    request = add_sub_request(server)
    request.set_output_buffer("OUTPUT1", storage)
    tensor = server.model("add_sub").infer(request).result().outputs["OUTPUT1"]
    assert tensor.data_type is DataType.FP32 and tensor.shape == (1, 4)
    assert tensor.memory_type is MemoryType.CPU
    assert tensor.to_numpy().tolist() == (A - B).tolist()
    written = (storage.numpy() if kind == "torch" else np.frombuffer(storage, np.uint8))
    assert np.shares_memory(tensor.to_numpy(), written)  # no copy beyond the one into it
    assert np.from_dlpack(tensor).tolist() == (A - B).tolist()


def test_allocator_is_called_per_output_with_its_description(server):
    calls = []

    def allocator(name, datatype, byte_size, memory_type, memory_type_id):
        calls.append((name, datatype, byte_size, memory_type, memory_type_id))
        return np.empty(byte_size, np.uint8)

    request = add_sub_request(server, output_allocator=allocator)
    response = server.model("add_sub").infer(request).result()
    assert sorted(calls) == [("OUTPUT0", DataType.FP32, 16, MemoryType.CPU, 0),
                             ("OUTPUT1", DataType.FP32, 16, MemoryType.CPU, 0)]
    assert response.outputs["OUTPUT0"].to_numpy().tolist() == (A + B).tolist()


def test_a_preallocated_buffer_wins_over_the_allocator(server):
    asked = []
    out1 = np.zeros((1, 4), np.float32)
    request = add_sub_request(
        server, output_buffers={"OUTPUT1": out1},
        output_allocator=lambda name, *rest: asked.append(name) or np.empty(16, np.uint8))
    server.model("add_sub").infer(request).result()
    assert asked == ["OUTPUT0"] and out1.tolist() == (A - B).tolist()


def test_pinned_memory_is_host_memory_reported_as_pinned(server):
    kinds = []

    def allocator(name, datatype, byte_size, memory_type, memory_type_id):
        kinds.append(memory_type)
        return bytearray(byte_size)

    request = add_sub_request(server, output_allocator=allocator,
                              output_memory_type="CPU_PINNED")
    response = server.model("add_sub").infer(request).result()
    assert kinds == [MemoryType.CPU_PINNED] * 2
    assert {t.memory_type for t in response.outputs.values()} == {MemoryType.CPU_PINNED}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU")
def test_gpu_output_memory_without_a_device_is_unsupported(server):
    with pytest.raises(UnsupportedError, match="no CUDA device"):
        add_sub_request(server, output_memory_type=MemoryType.GPU)
    request = add_sub_request(server)
    with pytest.raises(UnsupportedError):
        request.output_memory_type = "GPU"
    assert request.output_memory_type is MemoryType.CPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_outputs_land_in_device_memory(server):
    target = torch.zeros(4, device="cuda:0")
    request = add_sub_request(server, output_memory_type=MemoryType.GPU,
                              output_buffers={"OUTPUT0": target})
    response = server.model("add_sub").infer(request).result()
    for tensor in response.outputs.values():
        assert tensor.memory_type is MemoryType.GPU
    assert target.cpu().tolist() == (A + B).reshape(4).tolist()
    assert torch.from_dlpack(response.outputs["OUTPUT1"]).cpu().tolist() == (A - B).tolist()


def test_unknown_memory_type_is_refused(server):
    with pytest.raises(InvalidArgumentError, match="unknown memory type"):
        add_sub_request(server, output_memory_type="HBM")


def test_bytes_outputs_are_written_in_wire_form(server):
    sizes = []
    buffer = bytearray(64)

    def allocator(name, datatype, byte_size, memory_type, memory_type_id):
        sizes.append((name, datatype, byte_size))
        return buffer

    model = server.model("words")
    request = model.create_request(inputs={"IN": [b"hello", b"ok"]},
                                   output_allocator=allocator)
    response = model.infer(request).result()
    assert sizes == [("OUT", DataType.BYTES, 4 + 5 + 4 + 2)]
    assert deserialize_bytes_tensor(bytes(buffer[:15]), 2).tolist() == [b"hello", b"ok"]
    assert response.outputs["OUT"].to_bytes_array().tolist() == [b"hello", b"ok"]


def test_a_buffer_too_small_fails_that_response_and_the_server_keeps_serving(server):
    released = []
    model = server.model("add_sub")
    request = add_sub_request(server, output_buffers={"OUTPUT0": bytearray(8)},
                              release_callback=released.append)
    with pytest.raises(InvalidArgumentError,
                       match="output 'OUTPUT0' of model 'add_sub' holds 8 bytes, but the "
                             "output needs 16"):
        model.infer(request).result()
    assert released == [request] and not request.in_flight
    response = model.infer(request, raise_on_error=False).result()
    assert isinstance(response.error, InvalidArgumentError) and not response.outputs
    assert response.final
    request.set_output_buffer("OUTPUT0", bytearray(16))
    assert model.infer(request).result().outputs["OUTPUT0"].to_numpy().tolist() == (
        A + B).tolist()
    assert model.statistics()[0].execution_count == 3  # the model ran every time


def test_an_allocator_that_raises_gives_an_error_response(server):
    def allocator(*args):
        raise MemoryError("arena exhausted")

    model = server.model("add_sub")
    request = add_sub_request(server, output_allocator=allocator)
    response = model.infer(request, raise_on_error=False).result()
    assert isinstance(response.error, InternalError)
    assert "MemoryError: arena exhausted" in str(response.error)
    assert model.infer(add_sub_request(server)).result().error is None


@pytest.mark.parametrize("buffer, match", [
    (None, "returned no buffer"),
    (b"\0" * 16, "writable"),
    (np.zeros((4, 4), np.float32)[:, 0], "C-contiguous"),
    (object(), "not a contiguous buffer"),
])
def test_unusable_buffers_give_clear_errors(server, buffer, match):
    request = add_sub_request(server, output_allocator=lambda *args: buffer)
    with pytest.raises((InvalidArgumentError, InternalError), match=match):
        server.model("add_sub").infer(request).result()
