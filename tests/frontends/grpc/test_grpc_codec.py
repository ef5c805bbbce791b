"""ModelInferRequest -> InferRequest and InferResponse -> ModelInferResponse, as Triton's
gRPC frontend converts them."""

from __future__ import annotations

import mmap
import os
import uuid

import ml_dtypes
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from infercore import (
    DataType,
    InferResponse,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    Tensor,
    serialize_bytes_tensor,
)
from infercore.frontends.grpc.codec import OutputSpec, decode_request, parse_version
from infercore.frontends.grpc.encode import encode_response, serialize_response
from infercore.frontends.shm import SystemSharedMemory
from infercore.kserve.tensors import wire_buffer
from infercore.tensor import RawInput


def request_with(**inputs: np.ndarray) -> pb.ModelInferRequest:
    """A request for model "m" carrying each array raw, as tritonclient sends it."""
    request = pb.ModelInferRequest(model_name="m")
    for name, array in inputs.items():
        datatype = DataType.from_numpy(array.dtype).value
        request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        data = (serialize_bytes_tensor(array) if datatype == "BYTES" else array.tobytes())
        request.raw_input_contents.append(data)
    return request


@pytest.fixture
def registry() -> SystemSharedMemory:
    return SystemSharedMemory()


def test_raw_inputs_become_numpy_views_of_the_right_type_and_shape(registry):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([[True, False]])
    decoded = decode_request(request_with(A=a, B=b), registry)
    request = decoded.request
    assert request.model_name == "m" and request.model_version == -1
    assert request.requested_outputs is None and decoded.outputs is None
    np.testing.assert_array_equal(request.inputs["A"].to_numpy(), a)
    assert request.inputs["A"].data_type is DataType.FP32
    np.testing.assert_array_equal(request.inputs["B"].to_numpy(), b)
    assert not request.inputs["A"].to_numpy().flags.owndata  # a view, not a copy


def test_bytes_and_half_precision_travel_raw(registry):
    text = np.array([[b"a", b""], [b"\x00bc", "\u00e9".encode()]], dtype=np.object_)
    half = np.array([1.5, -2.0], dtype=np.float16)
    brain = np.array([0.5, 3.0], dtype=ml_dtypes.bfloat16)
    request = decode_request(request_with(T=text, H=half, G=brain), registry).request
    assert request.inputs["T"].to_bytes_array().tolist() == text.tolist()
    np.testing.assert_array_equal(request.inputs["H"].to_numpy(), half)
    assert request.inputs["G"].data_type is DataType.BF16
    np.testing.assert_array_equal(request.inputs["G"].to_numpy(), brain)


def test_data_that_does_not_fit_its_shape_is_left_to_the_models_validation(registry):
    # Triton's core checks sizes after names, batch, datatypes and shapes: the decoder
    # hands such inputs on as they came.
    request = request_with(A=np.zeros(4, np.float32), B=np.zeros(1, np.float32))
    request.raw_input_contents[0] = b"\x00" * 12
    request.inputs[1].shape[0] = -2
    inputs = decode_request(request, registry).request.inputs
    assert type(inputs["A"]) is RawInput
    assert (inputs["A"].data_type, inputs["A"].shape, inputs["A"].byte_size) == (
        DataType.FP32, (4,), 12)
    assert type(inputs["B"]) is RawInput and inputs["B"].shape == (-2,)


def test_malformed_bytes_data_is_kept_for_the_models_validation(registry):
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="BYTES", shape=[2])
    request.raw_input_contents.append(b"\x01\x00\x00\x00a\x09\x00")
    tensor = decode_request(request, registry).request.inputs["A"]
    assert type(tensor) is RawInput and bytes(tensor.data) == b"\x01\x00\x00\x00a\x09\x00"


def test_an_input_without_data_is_refused(registry):
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="FP32", shape=[1])
    with pytest.raises(InvalidArgumentError, match="unable to find data for input tensor 'A'"):
        decode_request(request, registry)


def test_unknown_datatypes_pass_to_validation_and_duplicate_inputs_are_refused(registry):
    request = request_with(A=np.zeros(1, np.float32))
    request.inputs[0].datatype = "FP8"
    tensor = decode_request(request, registry).request.inputs["A"]
    assert type(tensor) is RawInput and tensor.data_type is None  # Triton's '<invalid>'
    request.inputs[0].contents.int_contents.append(1)
    del request.raw_input_contents[:]
    with pytest.raises(InvalidArgumentError, match="of type 'INT32', expected datatype "
                                                   "'<invalid>'"):
        decode_request(request, registry)
    request = request_with(A=np.zeros(1, np.float32))
    request.id = "r7"
    request.inputs.add(name="A", datatype="FP32", shape=[1])
    with pytest.raises(InvalidArgumentError) as raised:  # before any data is looked for
        decode_request(request, registry)
    assert raised.value.message == "[request id: r7] input 'A' already exists in request"


@pytest.mark.parametrize(("datatype", "field", "values", "expected"), [
    ("BOOL", "bool_contents", [True, False], [True, False]),
    ("INT8", "int_contents", [1, -2, 255], [1, -2, -1]),
    ("INT16", "int_contents", [1, 70000], [1, 70000 - 65536]),
    ("INT32", "int_contents", [-5, 5], [-5, 5]),
    ("INT64", "int64_contents", [2**40], [2**40]),
    ("UINT8", "uint_contents", [1, 257], [1, 1]),
    ("UINT16", "uint_contents", [65537], [1]),
    ("UINT32", "uint_contents", [2**32 - 1], [2**32 - 1]),
    ("UINT64", "uint64_contents", [2**63], [2**63]),
    ("FP32", "fp32_contents", [0.5, -1.0], [0.5, -1.0]),
    ("FP64", "fp64_contents", [1e300], [1e300]),
    ("BYTES", "bytes_contents", [b"x", b""], [b"x", b""]),
])
def test_typed_contents_of_each_datatype(registry, datatype, field, values, expected):
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="A", datatype=datatype, shape=[len(values)])
    getattr(tensor.contents, field).extend(values)
    decoded = decode_request(request, registry).request.inputs["A"]
    assert decoded.data_type.value == datatype
    assert decoded.to_numpy().tolist() == expected


def test_typed_contents_must_match_the_datatype(registry):
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="FP16", shape=[1]).contents.fp32_contents.append(1)
    with pytest.raises(InvalidArgumentError) as raised:
        decode_request(request, registry)
    assert raised.value.message == (
        "unexpected explicit tensor data for input tensor 'A' for model 'm' of type 'FP32', "
        "expected datatype 'FP16'")


def test_typed_contents_conflicts_are_refused(registry):
    request = pb.ModelInferRequest(model_name="m")
    contents = request.inputs.add(name="A", datatype="INT32", shape=[1]).contents
    contents.int_contents.append(1)
    contents.fp32_contents.append(1.0)
    with pytest.raises(InvalidArgumentError, match="binary data was already supplied"):
        decode_request(request, registry)
    request = request_with(B=np.zeros(1, np.float32))
    request.inputs.add(name="A", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    with pytest.raises(InvalidArgumentError, match="contents field must not be specified"):
        decode_request(request, registry)
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="INT32", shape=[2]).contents.int_contents.append(1)
    tensor = decode_request(request, registry).request.inputs["A"]
    assert type(tensor) is RawInput and tensor.byte_size == 4  # 1 INT32 of the 2 needed


def test_request_parameters_set_the_request_fields_and_pass_the_rest_on(registry):
    request = request_with(A=np.zeros(1, np.float32))
    request.id = "r1"
    request.model_version = "3"
    params = request.parameters
    params["sequence_id"].string_param = "s-1"
    params["sequence_start"].bool_param = True
    params["sequence_end"].bool_param = False
    params["priority"].uint64_param = 2
    params["timeout"].int64_param = 1000
    params["triton_enable_empty_final_response"].bool_param = True
    params["i"].int64_param = -3
    params["b"].bool_param = True
    params["s"].string_param = "x"
    params["d"].double_param = 0.25
    decoded = decode_request(request, registry)
    r = decoded.request
    assert (r.id, r.model_version, r.correlation_id) == ("r1", 3, "s-1")
    assert (r.sequence_start, r.sequence_end, r.priority, r.timeout_us) == (True, False, 2, 1000)
    assert r.parameters == {"i": -3, "b": True, "s": "x", "d": 0.25}
    assert decoded.empty_final_response is True


@pytest.mark.parametrize(("key", "kind", "value", "message"), [
    ("sequence_id", "bool_param", True, "expected int64_param or string_param"),
    ("sequence_start", "int64_param", 1, "'sequence_start' parameter, expected bool_param"),
    ("priority", "int64_param", -1, "invalid value for 'priority', expected value >= 0."),
    ("timeout", "string_param", "1", "'timeout' parameter, expected int64_param"),
    ("triton_other", "bool_param", True, "reserved for Triton usage"),
    ("custom", "uint64_param", 1, "expected int64_param, bool_param, or string_param"),
])
def test_badly_typed_parameters_are_refused(registry, key, kind, value, message):
    request = request_with(A=np.zeros(1, np.float32))
    setattr(request.parameters[key], kind, value)
    with pytest.raises(InvalidArgumentError, match=message):
        decode_request(request, registry)


def test_model_versions_parse_as_triton_reads_them():
    assert parse_version("") == -1 and parse_version("7") == 7
    with pytest.raises(InvalidArgumentError, match="failed to get model version"):
        parse_version("seven")
    with pytest.raises(InvalidArgumentError, match="invalid model version"):
        parse_version("-2")


def test_requested_outputs_with_classification_and_shared_memory(registry):
    request = request_with(A=np.zeros(1, np.float32))
    request.outputs.add(name="PLAIN")
    request.outputs.add(name="TOP").parameters["classification"].int64_param = 3
    target = request.outputs.add(name="SHM")
    target.parameters["shared_memory_region"].string_param = "r"
    target.parameters["shared_memory_byte_size"].int64_param = 64
    target.parameters["shared_memory_offset"].int64_param = 8
    decoded = decode_request(request, registry)
    assert decoded.request.requested_outputs == ("PLAIN", "TOP", "SHM")
    assert decoded.outputs == {"TOP": OutputSpec(classification=3),
                               "SHM": OutputSpec(0, "r", 8, 64)}


def test_output_parameter_errors(registry):
    request = request_with(A=np.zeros(1, np.float32))
    both = request.outputs.add(name="X")
    both.parameters["classification"].int64_param = 1
    both.parameters["shared_memory_region"].string_param = "r"
    both.parameters["shared_memory_byte_size"].int64_param = 4
    with pytest.raises(InvalidArgumentError, match="can't set both"):
        decode_request(request, registry)
    request = request_with(A=np.zeros(1, np.float32))
    request.outputs.add(name="X").parameters["shared_memory_region"].string_param = "r"
    with pytest.raises(InvalidArgumentError, match="'shared_memory_byte_size' must be specified"):
        decode_request(request, registry)
    request = request_with(A=np.zeros(1, np.float32))
    request.outputs.add(name="X").parameters["classification"].int64_param = 0
    with pytest.raises(InvalidArgumentError, match="invalid value for 'classification'"):
        decode_request(request, registry)


@pytest.fixture
def shm_key():
    key = f"infercore-test-{uuid.uuid4().hex}"
    fd = os.open(f"/dev/shm/{key}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 64)
    os.close(fd)
    yield key
    os.unlink(f"/dev/shm/{key}")


def _shm_view(key: str) -> mmap.mmap:
    fd = os.open(f"/dev/shm/{key}", os.O_RDWR)
    try:
        return mmap.mmap(fd, 64)
    finally:
        os.close(fd)


def test_inputs_are_read_from_shared_memory_without_a_copy(registry, shm_key):
    view = _shm_view(shm_key)
    view[16:32] = np.array([1, 2, 3, 4], np.float32).tobytes()
    registry.register("region", shm_key, 0, 64)
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="A", datatype="FP32", shape=[4])
    tensor.parameters["shared_memory_region"].string_param = "region"
    tensor.parameters["shared_memory_offset"].int64_param = 16
    tensor.parameters["shared_memory_byte_size"].int64_param = 16
    array = decode_request(request, registry).request.inputs["A"].to_numpy()
    assert array.tolist() == [1, 2, 3, 4]
    view[16:20] = np.array([9], np.float32).tobytes()
    assert array[0] == 9  # the same memory
    tensor.parameters["shared_memory_region"].string_param = "missing"
    with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'missing'"):
        decode_request(request, registry)


def _response(**outputs: Tensor) -> InferResponse:
    return InferResponse("m", 2, "id-1", dict(outputs), {"b": True, "i": 3, "f": 0.5, "s": "x"})


def test_responses_carry_raw_outputs_ids_and_parameters():
    text = np.array([b"ab", b""], dtype=np.object_)
    out = pb.ModelInferResponse()
    encode_response(_response(Y=Tensor.from_numpy(np.eye(2, dtype=np.float64)),
                              T=Tensor.from_numpy(text)), out)
    assert (out.model_name, out.model_version, out.id) == ("m", "2", "id-1")
    assert [(o.name, o.datatype, list(o.shape)) for o in out.outputs] == [
        ("Y", "FP64", [2, 2]), ("T", "BYTES", [2])]
    assert out.raw_output_contents[0] == np.eye(2).tobytes()
    assert out.raw_output_contents[1] == serialize_bytes_tensor(text)
    p = out.parameters
    assert (p["b"].bool_param, p["i"].int64_param, p["f"].double_param, p["s"].string_param) == (
        True, 3, 0.5, "x")


def test_classification_outputs_become_labelled_top_k_strings():
    scores = Tensor.from_numpy(np.array([[0.1, 0.9, 0.5]], np.float32))
    out = pb.ModelInferResponse()
    encode_response(_response(S=scores), out, {"S": OutputSpec(classification=2)},
                    labels_for=lambda name: (["a", "b", "c"], True))
    assert out.outputs[0].datatype == "BYTES" and list(out.outputs[0].shape) == [1, 2]
    assert out.raw_output_contents[0] == serialize_bytes_tensor(
        np.array([b"0.900000:1:b", b"0.500000:2:c"], dtype=np.object_))


def test_shared_memory_outputs_are_written_in_place(registry, shm_key):
    registry.register("region", shm_key, 0, 64)
    out = pb.ModelInferResponse()
    values = Tensor.from_numpy(np.array([5, 6], np.int32))
    encode_response(_response(V=values), out, {"V": OutputSpec(0, "region", 4, 8)}, registry)
    assert list(out.raw_output_contents) == [b""]
    assert np.frombuffer(_shm_view(shm_key)[4:12], np.int32).tolist() == [5, 6]
    with pytest.raises(InternalError, match="should be at least 8 bytes"):
        encode_response(_response(V=values), pb.ModelInferResponse(),
                        {"V": OutputSpec(0, "region", 4, 4)}, registry)


def test_the_direct_serialization_equals_protobufs():
    outputs = {"A": Tensor.from_numpy(np.zeros((3, 300), np.float32)),
               "": Tensor.from_numpy(np.array([b"x" * 200, b""], dtype=np.object_)),
               "S": Tensor.from_numpy(np.array(2.5))}
    for response in (InferResponse("m" * 200, 12345, "", outputs),
                     InferResponse("add_sub", 0, "id", {}),
                     InferResponse("", 1, "r" * 130, outputs)):
        out = pb.ModelInferResponse()
        encode_response(response, out)
        assert serialize_response(response) == out.SerializeToString()
    assert serialize_response(InferResponse("m", 1, "", outputs, {"p": 1})) is None


def test_large_and_strided_outputs_serialize_as_protobuf_does():
    # 1 MiB FP32 (written from the array itself), a transposed view, booleans, float16
    large = np.arange(262144, dtype=np.float32)
    outputs = {"L": Tensor.from_numpy(large),
               "T": Tensor.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4).T),
               "B": Tensor.from_numpy(np.array([[True, False]])),
               "H": Tensor.from_numpy(np.ones((2, 2), np.float16))}
    response = InferResponse("identity_large", 1, "id", outputs)
    out = pb.ModelInferResponse()
    encode_response(response, out)
    assert serialize_response(response) == out.SerializeToString()


def test_a_contiguous_tensor_is_its_own_wire_buffer():
    large = np.arange(262144, dtype=np.float32)
    data, size = wire_buffer(large, DataType.FP32)
    assert data is large and size == 1 << 20  # no copy before the join
    strided = large[::2]
    data, size = wire_buffer(strided, DataType.FP32)
    assert data == strided.tobytes() and size == 1 << 19
    text = np.array([b"ab", b""], dtype=np.object_)
    assert wire_buffer(text, DataType.BYTES) == (serialize_bytes_tensor(text), 10)
