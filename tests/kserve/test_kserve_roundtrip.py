"""The KServe wire end to end in memory: a request encoded as a client encodes it (the
RemoteServer's codecs, or tritonclient's for the forms RemoteServer does not send),
decoded as the server decodes it, and the response encoded by the server and decoded by
the RemoteServer, for every datatype, over REST (binary and JSON) and gRPC (raw and
typed contents), with inputs and outputs in system shared memory."""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator

import numpy as np
import orjson
import pytest
import tritonclient.http as triton_http
from tritonclient.grpc import service_pb2

from infercore.errors import InvalidArgumentError, UnsupportedError
from infercore.frontends.grpc import codec as grpc_codec
from infercore.frontends.grpc import encode as grpc_encode
from infercore.frontends.http import decode as http_decode
from infercore.frontends.http import encode as http_encode
from infercore.frontends.shm import SystemSharedMemory
from infercore.kserve.params import from_infer_parameter, to_infer_parameter
from infercore.kserve.tensors import CONTENTS_FIELD, array_bytes, tensor_from_bytes
from infercore.remote import grpc_transport, http_codec
from infercore.request import InferRequest
from infercore.response import InferResponse
from infercore.tensor import DataType, RawInput, Tensor


def _sample(data_type: DataType, shape: tuple[int, ...] = (2, 3), text: bool = False
            ) -> np.ndarray:
    """Extremes of each datatype; BYTES with bytes that are not UTF-8 unless ``text``."""
    count = int(np.prod(shape))
    if data_type is DataType.BYTES:
        values = [b"", b"a", "\u00e9t\u00e9".encode(), b"\x00" if text else b"\x00\xff",
                  b"x" * 300, b"z"]
        array = np.empty(count, dtype=np.object_)
        array[:] = (values * count)[:count]
        return array.reshape(shape)
    if data_type is DataType.BOOL:
        return (np.arange(count) % 2 == 0).reshape(shape)
    dtype = data_type.numpy_dtype
    if data_type.value.startswith(("FP", "BF")):
        return (np.arange(count, dtype=np.float32) * 0.5 - 1).astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    values = np.array([int(info.min), int(info.max), 0, 1, int(info.max) - 1,
                       int(info.min) + 1][:count], dtype=dtype)
    return np.resize(values, count).reshape(shape)


ALL_TYPES = list(DataType)
JSON_TYPES = [dt for dt in DataType if dt not in (DataType.FP16, DataType.BF16)]


def _same(tensor: Tensor, expected: np.ndarray, data_type: DataType) -> None:
    assert type(tensor) is Tensor, tensor
    assert tensor.data_type is data_type
    got = tensor.to_numpy()
    assert got.shape == expected.shape
    if data_type is DataType.BYTES:
        assert got.tolist() == expected.tolist()
    else:
        assert got.dtype == expected.dtype
        assert got.tobytes() == expected.tobytes()


def _request(data_type: DataType, shape: tuple[int, ...] = (2, 3), **fields) -> InferRequest:
    inputs = {"IN": Tensor(data_type, _sample(data_type, shape)),
              "SECOND": Tensor(DataType.INT32, np.arange(3, dtype=np.int32))}
    return InferRequest("m", inputs, model_version=2, id="req-1", **fields)


def _response(request: InferRequest, parameters=None) -> InferResponse:
    # the "model" echoes its inputs as outputs
    return InferResponse("m", 2, request.id, dict(request.inputs), dict(parameters or {}),
                         None, True)


_FIELDS = dict(correlation_id=77, sequence_start=True, sequence_end=True, priority=3,
               timeout_us=5000, parameters={"text": "x", "count": -4, "on": True, "ratio": 0.5})


def _check_fields(request: InferRequest) -> None:
    assert (request.model_name, request.model_version, request.id) == ("m", 2, "req-1")
    assert request.correlation_id == 77 and request.sequence_start and request.sequence_end
    assert (request.priority, request.timeout_us) == (3, 5000)
    assert request.parameters == _FIELDS["parameters"]


@pytest.fixture
def shm() -> Iterator[tuple[SystemSharedMemory, str]]:
    """A registry with region 'r' of 4 KiB over a fresh object, and its key."""
    key = f"/infercore_rt_{uuid.uuid4().hex[:12]}"
    fd = os.open(f"/dev/shm{key}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, 4096)
    os.close(fd)
    registry = SystemSharedMemory()
    registry.register("r", key, 0, 4096)
    try:
        yield registry, key
    finally:
        registry.unregister()
        os.unlink(f"/dev/shm{key}")


# -- gRPC ---------------------------------------------------------------------------------------

def _grpc_server_side(wire: bytes, split: bool) -> grpc_codec.DecodedRequest:
    if split:
        parts = grpc_codec.split_raw_contents(wire)
        assert parts is not None
        head, raw = parts
        return grpc_codec.decode_request(service_pb2.ModelInferRequest.FromString(head),
                                         SystemSharedMemory(), raw)
    return grpc_codec.decode_request(service_pb2.ModelInferRequest.FromString(wire),
                                     SystemSharedMemory())


@pytest.mark.parametrize("split", [False, True], ids=["parsed", "split"])
@pytest.mark.parametrize("data_type", ALL_TYPES, ids=lambda d: d.value)
def test_grpc_request_and_response_round_trip(data_type, split):
    sent = _request(data_type, **_FIELDS)
    wire = grpc_transport.encode_request(sent).SerializeToString()
    decoded = _grpc_server_side(wire, split)
    received = decoded.request
    _check_fields(received)
    for name, tensor in sent.inputs.items():
        _same(received.inputs[name], tensor.to_numpy(), tensor.data_type)

    # the server's two encoders, each read back by the client
    response = _response(received)
    fast = grpc_encode.serialize_response(response)
    assert fast is not None
    message = service_pb2.ModelInferResponse()
    grpc_encode.encode_response(response, message)
    assert message.SerializeToString() == fast
    for data in (fast, message.SerializeToString()):
        back = grpc_transport.decode_response(
            service_pb2.ModelInferResponse.FromString(data), final=True)
        assert (back.model, back.model_version, back.request_id) == ("m", 2, "req-1")
        for name, tensor in sent.inputs.items():
            _same(back.outputs[name], tensor.to_numpy(), tensor.data_type)


def test_grpc_response_parameters_round_trip():
    request = _request(DataType.FP32)
    parameters = {"text": "t", "n": 9, "flag": False, "ratio": 2.5}
    response = _response(request, parameters)
    assert grpc_encode.serialize_response(response) is None  # parameters: the message form
    message = service_pb2.ModelInferResponse()
    grpc_encode.encode_response(response, message)
    back = grpc_transport.decode_response(
        service_pb2.ModelInferResponse.FromString(message.SerializeToString()), final=False)
    assert back.parameters == parameters and not back.final


@pytest.mark.parametrize("value", ["s", "", 0, -(1 << 63), (1 << 63) - 1, True, False, 1.5])
def test_infer_parameter_values_round_trip(value):
    parameter = service_pb2.InferParameter()
    to_infer_parameter(value, parameter)
    back = from_infer_parameter(service_pb2.InferParameter.FromString(
        parameter.SerializeToString()))
    assert back == value and type(back) is type(value)


def _contents(array: np.ndarray, data_type: DataType) -> service_pb2.InferTensorContents:
    contents = service_pb2.InferTensorContents()
    getattr(contents, CONTENTS_FIELD[data_type]).extend(array.reshape(-1).tolist())
    return contents


@pytest.mark.parametrize("data_type", JSON_TYPES, ids=lambda d: d.value)
def test_grpc_typed_contents_both_ways(data_type):
    """Typed contents (what tritonclient sends for a non-raw input, and what servers that
    send no raw outputs answer) read by the server as inputs and by the client as outputs."""
    array = _sample(data_type)
    message = service_pb2.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="IN", datatype=data_type.value, shape=array.shape)
    tensor.contents.CopyFrom(_contents(array, data_type))
    decoded = grpc_codec.decode_request(service_pb2.ModelInferRequest.FromString(
        message.SerializeToString()), SystemSharedMemory())
    _same(decoded.request.inputs["IN"], array, data_type)

    reply = service_pb2.ModelInferResponse(model_name="m", model_version="1")
    output = reply.outputs.add(name="OUT", datatype=data_type.value, shape=array.shape)
    output.contents.CopyFrom(_contents(array, data_type))
    back = grpc_transport.decode_response(reply, final=True)
    _same(back.outputs["OUT"], array, data_type)


def test_grpc_contents_of_another_datatype_are_refused():
    message = service_pb2.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="IN", datatype="FP16", shape=[2])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="of type 'FP32', expected datatype 'FP16'"):
        grpc_codec.decode_request(message, SystemSharedMemory())
    tensor.datatype = "INT8"
    tensor.contents.Clear()
    tensor.contents.int64_contents.extend([1, 2])
    with pytest.raises(InvalidArgumentError, match="of type 'INT64', expected datatype 'INT8'"):
        grpc_codec.decode_request(message, SystemSharedMemory())


@pytest.mark.parametrize("data_type", [DataType.FP32, DataType.BYTES, DataType.BF16],
                         ids=lambda d: d.value)
def test_grpc_shared_memory_input_and_output(shm, data_type):
    registry, _ = shm
    array = _sample(data_type)
    data = array_bytes(array, data_type)
    region = registry.region("r")
    region.view(64, len(data))[:] = data
    message = service_pb2.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="IN", datatype=data_type.value, shape=array.shape)
    tensor.parameters["shared_memory_region"].string_param = "r"
    tensor.parameters["shared_memory_offset"].int64_param = 64
    tensor.parameters["shared_memory_byte_size"].int64_param = len(data)
    out = message.outputs.add(name="IN")
    out.parameters["shared_memory_region"].string_param = "r"
    out.parameters["shared_memory_offset"].int64_param = 2048
    out.parameters["shared_memory_byte_size"].int64_param = 2048
    decoded = grpc_codec.decode_request(service_pb2.ModelInferRequest.FromString(
        message.SerializeToString()), registry)
    _same(decoded.request.inputs["IN"], array, data_type)
    assert decoded.outputs is not None
    reply = service_pb2.ModelInferResponse()
    grpc_encode.encode_response(_response(decoded.request), reply, decoded.outputs, registry)
    assert list(reply.raw_output_contents) == [b""]  # the data went to the region
    assert bytes(region.view(2048, len(data))) == data


# -- REST ---------------------------------------------------------------------------------------

def _rest_server_side(body: bytes, header_length: int | None, shm=None
                      ) -> http_decode.DecodedInfer:
    return http_decode.decode_infer("m", 2, body, header_length, shm or SystemSharedMemory())


def _rest_back(response: InferResponse, decoded: http_decode.DecodedInfer) -> InferResponse:
    encoded = http_encode.encode_infer(response, decoded, lambda name: ([], False))
    body = encoded.header + b"".join(bytes(b) for b in encoded.binary)
    return http_codec.decode_infer(body, len(encoded.header) if encoded.binary else None)


@pytest.mark.parametrize("data_type", ALL_TYPES, ids=lambda d: d.value)
def test_rest_binary_request_and_response_round_trip(data_type):
    sent = _request(data_type, **_FIELDS)
    body, header_length = http_codec.encode_infer(sent)
    decoded = _rest_server_side(body, header_length)
    _check_fields(decoded.request)
    assert decoded.binary_default  # the client asks for binary outputs
    for name, tensor in sent.inputs.items():
        _same(decoded.request.inputs[name], tensor.to_numpy(), tensor.data_type)
    back = _rest_back(_response(decoded.request), decoded)
    assert (back.model, back.model_version, back.request_id) == ("m", 2, "req-1")
    for name, tensor in sent.inputs.items():
        _same(back.outputs[name], tensor.to_numpy(), tensor.data_type)


def test_rest_large_binary_outputs_go_back_as_views():
    """Outputs of 64 KiB and more leave the server as views of the output arrays."""
    sent = InferRequest("m", {"IN": Tensor(DataType.FP32, np.arange(1 << 15,
                                                                  dtype=np.float32))})
    body, header_length = http_codec.encode_infer(sent)
    decoded = _rest_server_side(body, header_length)
    encoded = http_encode.encode_infer(_response(decoded.request), decoded,
                                       lambda name: ([], False))
    assert isinstance(encoded.binary[0], memoryview)
    _same(_rest_back(_response(decoded.request), decoded).outputs["IN"],
          sent.inputs["IN"].to_numpy(), DataType.FP32)


@pytest.mark.parametrize("data_type", JSON_TYPES, ids=lambda d: d.value)
def test_rest_json_request_and_response_round_trip(data_type):
    """tritonclient's JSON form in (RemoteServer sends binary only), JSON data out."""
    array = _sample(data_type, text=True)
    client_input = triton_http.InferInput("IN", list(array.shape), data_type.value)
    client_input.set_data_from_numpy(array, binary_data=False)
    body, json_size = triton_http.InferenceServerClient.generate_request_body(
        [client_input], [triton_http.InferRequestedOutput("IN", binary_data=False)],
        request_id="req-1", sequence_id=77, sequence_start=True,
        sequence_end=True, priority=3, timeout=5000, parameters=_FIELDS["parameters"])
    decoded = _rest_server_side(body, json_size)
    _check_fields(decoded.request)
    assert not decoded.outputs["IN"].binary
    _same(decoded.request.inputs["IN"], array, data_type)
    encoded = http_encode.encode_infer(_response(decoded.request), decoded,
                                       lambda name: ([], False))
    assert encoded.binary == []
    assert "data" in orjson.loads(encoded.header)["outputs"][0]
    back = http_codec.decode_infer(encoded.header, None)
    _same(back.outputs["IN"], array, data_type)


@pytest.mark.parametrize("data_type", [DataType.FP16, DataType.BF16], ids=lambda d: d.value)
def test_rest_json_refuses_fp16_and_bf16_both_ways(data_type):
    document = {"inputs": [{"name": "IN", "datatype": data_type.value, "shape": [1],
                            "data": [1.0]}]}
    with pytest.raises(InvalidArgumentError, match=f"receiving {data_type.value} data via "
                       "JSON is not supported"):
        _rest_server_side(orjson.dumps(document), None)
    # a response asked for as JSON
    sent = InferRequest("m", {"IN": Tensor(data_type, _sample(data_type))})
    body, header_length = http_codec.encode_infer(sent)
    decoded = _rest_server_side(body, header_length)
    decoded.binary_default = False
    with pytest.raises(InvalidArgumentError, match=f"sending {data_type.value} data via "
                       "JSON is not supported"):
        http_encode.encode_infer(_response(decoded.request), decoded, lambda n: ([], False))


@pytest.mark.parametrize("data_type", [DataType.INT64, DataType.BYTES, DataType.FP16],
                         ids=lambda d: d.value)
def test_rest_shared_memory_input_and_output(shm, data_type):
    registry, _ = shm
    array = _sample(data_type)
    data = array_bytes(array, data_type)
    registry.region("r").view(128, len(data))[:] = data
    client_input = triton_http.InferInput("IN", list(array.shape), data_type.value)
    client_input.set_shared_memory("r", len(data), offset=128)
    client_output = triton_http.InferRequestedOutput("IN")
    client_output.set_shared_memory("r", 2048, offset=2048)
    body, json_size = triton_http.InferenceServerClient.generate_request_body(
        [client_input], outputs=[client_output])
    decoded = _rest_server_side(body, json_size, registry)
    _same(decoded.request.inputs["IN"], array, data_type)
    encoded = http_encode.encode_infer(_response(decoded.request), decoded,
                                       lambda n: ([], False))
    assert encoded.binary == []
    assert bytes(registry.region("r").view(2048, len(data))) == data
    # the answer names the output but carries no data, which RemoteServer says it cannot read
    with pytest.raises(UnsupportedError, match="shared memory outputs"):
        http_codec.decode_infer(encoded.header, None)


# -- the shared rule for bytes that do not fit ----------------------------------------------

@pytest.mark.parametrize(("data_type", "shape", "data", "count"), [
    (DataType.FP32, (2,), b"\x00" * 4, 2),             # too few bytes
    (DataType.INT8, (3,), b"\x00" * 4, 3),             # too many
    (DataType.BYTES, (2,), b"\x01\x00\x00\x00a", 2),   # one element where two are due
    (DataType.BYTES, (1,), b"\x09\x00\x00\x00a", 1),   # a length past the end
    (DataType.FP32, (-1, -1), b"\x00" * 4, 1),         # negative dimensions
    (DataType.BYTES, (), b"\x01\x00\x00\x00a", 0),     # HTTP's count of a scalar: 0
    (None, (1,), b"\x00", 1),                           # a datatype Triton does not know
])
def test_bytes_that_do_not_fit_are_a_raw_input_and_refused_by_the_client(
        data_type, shape, data, count):
    tensor = tensor_from_bytes(data_type, shape, data, count)
    assert type(tensor) is RawInput
    assert (tensor.shape, tensor.byte_size) == (shape, len(data))
    assert (tensor.data is not None) == (data_type is DataType.BYTES)
    if data_type is not None and count == math.prod(shape):  # the client's count: gRPC's
        reply = service_pb2.ModelInferResponse(model_name="m")
        reply.outputs.add(name="OUT", datatype=data_type.value, shape=shape)
        reply.raw_output_contents.append(data)
        with pytest.raises(InvalidArgumentError, match="output 'OUT' holds"):
            grpc_transport.decode_response(reply, final=True)


def test_views_are_read_only_and_not_copies():
    body = np.arange(4, dtype=np.float32).tobytes()
    tensor = tensor_from_bytes(DataType.FP32, (2, 2), memoryview(body), 4)
    array = tensor.to_numpy()
    assert not array.flags.writeable
    assert np.shares_memory(array, np.frombuffer(body, np.uint8))
