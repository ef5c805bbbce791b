"""The HTTP frontend's codec: request decoding, response encoding, compression, classes."""

from __future__ import annotations

import gzip
import json
import mmap
import os
import struct
import uuid
import zlib

import ml_dtypes
import numpy as np
import orjson
import pytest

from infercore import DataType, InferResponse, Tensor
from infercore.errors import (
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnsupportedError,
)
from infercore.frontends.classification import classify
from infercore.frontends.http.decode import (
    DecodedInfer,
    OutputPlan,
    decode_infer,
    parse_header_length,
    raw_infer,
)
from infercore.frontends.http.encode import encode_infer
from infercore.frontends.http.header_cache import HeaderCache
from infercore.frontends.http.messages import (
    HttpResponse,
    accepted_encoding,
    compress,
    decompress,
    serialize_head,
)
from infercore.frontends.shm import SystemSharedMemory
from infercore.tensor import RawInput


def _body(inputs, outputs=None, binary: bytes = b"", **extra) -> tuple[bytes, int | None]:
    document = {"inputs": inputs, **extra}
    if outputs is not None:
        document["outputs"] = outputs
    header = json.dumps(document).encode()
    return header + binary, (len(header) if binary else None)


def _decode(inputs, outputs=None, binary=b"", shm=None, **extra) -> DecodedInfer:
    body, header_length = _body(inputs, outputs, binary, **extra)
    return decode_infer("m", -1, body, header_length, shm or SystemSharedMemory())


# -- decoding ------------------------------------------------------------------------------
def test_binary_inputs_are_views_over_the_body_not_copies():
    data = np.arange(6, dtype=np.float32)
    body, header_length = _body([{"name": "X", "shape": [2, 3], "datatype": "FP32",
                                  "parameters": {"binary_data_size": 24}}],
                                binary=data.tobytes())

    decoded = decode_infer("m", 2, body, header_length, SystemSharedMemory())

    array = decoded.request.inputs["X"].to_numpy()
    assert array.shape == (2, 3) and array.tolist() == data.reshape(2, 3).tolist()
    assert np.shares_memory(array, np.frombuffer(body, np.uint8))
    assert decoded.request.model_version == 2


def test_binary_bytes_inputs_use_the_length_prefixed_form():
    items = [b"ab", b"", b"xyz"]
    wire = b"".join(struct.pack("<I", len(i)) + i for i in items)

    decoded = _decode([{"name": "S", "shape": [3], "datatype": "BYTES",
                        "parameters": {"binary_data_size": len(wire)}}], binary=wire)

    assert decoded.request.inputs["S"].to_bytes_array().tolist() == items


def test_json_data_may_be_nested_or_flat():
    nested = _decode([{"name": "X", "shape": [2, 2], "datatype": "INT32",
                       "data": [[1, 2], [3, 4]]}])
    flat = _decode([{"name": "X", "shape": [2, 2], "datatype": "INT32", "data": [1, 2, 3, 4]}])

    for decoded in (nested, flat):
        tensor = decoded.request.inputs["X"]
        assert tensor.data_type is DataType.INT32
        assert tensor.to_numpy().tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("datatype, data, expected_dtype", [
    ("BOOL", [True, False], np.bool_),
    ("UINT64", [0, 2**64 - 1], np.uint64),
    ("INT8", [-128, 127], np.int8),
    ("FP64", [0.1, 3], np.float64),
])
def test_json_numbers_take_the_declared_datatype(datatype, data, expected_dtype):
    decoded = _decode([{"name": "X", "shape": [2], "datatype": datatype, "data": data}])

    array = decoded.request.inputs["X"].to_numpy()
    assert array.dtype == np.dtype(expected_dtype)
    assert array.astype(np.float64).tolist() == [float(v) for v in data]


def test_json_strings_become_utf8_bytes():
    decoded = _decode([{"name": "S", "shape": [1, 2], "datatype": "BYTES",
                        "data": [["\u00e9t\u00e9", "x"]]}])

    assert decoded.request.inputs["S"].to_bytes_array().tolist() == [["\u00e9t\u00e9".encode(),
                                                                     b"x"]]


@pytest.mark.parametrize("datatype, data, message", [
    ("INT32", [1.5, 2], "Unable to parse 'data': attempt to access JSON non-signed-integer "
                        "as signed-integer"),
    ("UINT8", [-1, 2], "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ("BOOL", [1, 0], "attempt to access JSON non-boolean as boolean"),
    ("FP32", ["1", "2"], "attempt to access JSON non-number as double"),
    ("FP32", [1, 2, 3], "Shape does not match true shape of 'data' field"),
    ("BYTES", [1, 2], "Unable to parse JSON bytes array: attempt to access JSON non-string"),
    ("FP32", 5, "attempt to access JSON non-array as array"),
])
def test_json_data_of_the_wrong_kind_or_count_is_an_internal_error(datatype, data, message):
    # TritonJson's failures are INTERNAL errors (HTTP 500) in Triton
    with pytest.raises(InternalError, match=message):
        _decode([{"name": "X", "shape": [2], "datatype": datatype, "data": data}])


@pytest.mark.parametrize("item, message", [
    ({"name": "X", "shape": [1], "datatype": "FP32"}, "But no field is set"),
    ({"name": "X", "shape": [1], "datatype": "FP32", "data": [1],
      "parameters": {"binary_data_size": 4}}, "But set 'data' 'binary_data_size'"),
    ({"name": "X", "shape": [1], "datatype": "NOPE", "data": [1]},
     "invalid datatype for input X"),
    ({"name": "X", "shape": [-1], "datatype": "FP32", "data": [1]}, "Unable to parse 'shape'"),
    ({"shape": [1], "datatype": "FP32", "data": [1]}, "Unable to parse 'name'"),
])
def test_malformed_inputs_are_refused_with_tritons_messages(item, message):
    with pytest.raises(TritonError, match=message):
        _decode([item])


def test_a_duplicated_input_is_refused():
    item = {"name": "X", "shape": [1], "datatype": "FP32", "data": [1]}
    with pytest.raises(InvalidArgumentError, match="input 'X' already exists"):
        _decode([item, item])


def test_request_parameters_set_the_request_fields_and_pass_the_rest_on():
    decoded = _decode([], parameters={
        "sequence_id": 9, "sequence_start": True, "sequence_end": False, "priority": 2,
        "timeout": 500, "binary_data_output": True, "mine": "x", "n": 1.5})

    request = decoded.request
    assert (request.correlation_id, request.sequence_start, request.sequence_end) == (9, True,
                                                                                      False)
    assert (request.priority, request.timeout_us) == (2, 500)
    assert request.parameters == {"mine": "x", "n": 1.5}
    assert decoded.binary_default is True


@pytest.mark.parametrize("parameters, message", [
    ({"triton_enable_empty_final_response": True}, "reserved for Triton usage"),
    ({"mine": [1]}, "has invalid type"),
    ({"priority": -1}, "Unable to parse 'priority'"),
    ({"sequence_start": 1}, "Unable to parse 'sequence_start'"),
    ({"sequence_id": 1.5}, "Unable to parse 'sequence_id'"),
])
def test_invalid_request_parameters_are_refused(parameters, message):
    with pytest.raises(TritonError, match=message):
        _decode([], parameters=parameters)


def test_requested_outputs_and_their_plans():
    decoded = _decode([], outputs=[{"name": "A", "parameters": {"binary_data": True}},
                                   {"name": "B", "parameters": {"classification": 3}}])

    assert decoded.request.requested_outputs == ("A", "B")
    assert decoded.outputs["A"].binary and decoded.outputs["B"].classification == 3


@pytest.mark.parametrize("parameters, message", [
    ({"shared_memory_region": "r", "classification": 1},
     "can't set both 'shared_memory_region' and 'classification'"),
    ({"shared_memory_region": "r", "binary_data": True},
     "can't set both 'shared_memory_region' and 'binary_data'"),
    ({"binary_data": "yes"}, "Unable to parse 'binary_data'"),
])
def test_conflicting_output_parameters_are_refused(parameters, message):
    with pytest.raises(TritonError, match=message):
        _decode([], outputs=[{"name": "A", "parameters": parameters}])


@pytest.mark.parametrize("value, body_length, expected", [
    (None, 10, None), (b"4", 10, 4), (b"10", 10, 10), (b"0", 10, 0),
    (b"ten", 10, 0), (b"4abc", 10, 4), (b" +4", 10, 4)])  # C's atoi, as Triton reads it
def test_header_length_parses_within_the_body(value, body_length, expected):
    assert parse_header_length(value, body_length) == expected


@pytest.mark.parametrize("value, message", [
    (b"11", "inference header size should be in range (0, 10), got: 11"),
    (b"-1", "inference header size should be in range (0, 10), got: -1"),
    (b"11abc", "inference header size should be in range (0, 10), got: 11abc")])
def test_header_length_outside_the_body_is_refused(value, message):
    with pytest.raises(InvalidArgumentError) as caught:
        parse_header_length(value, 10)
    assert caught.value.message == message


def test_a_raw_request_hands_the_body_to_the_model_and_answers_binary():
    body = np.arange(6, dtype=np.float32).tobytes()

    decoded = raw_infer("m", -1, body)

    assert decoded.request.raw_input is body and decoded.request.inputs == {}
    assert decoded.binary_default is True


def test_binary_data_that_does_not_fit_its_shape_is_left_to_the_model_to_report():
    header = {"inputs": [{"name": "X", "shape": [2], "datatype": "FP32",
                          "parameters": {"binary_data_size": 4}}]}
    head = orjson.dumps(header)

    decoded = decode_infer("m", -1, head + b"\0" * 4, len(head), SystemSharedMemory())

    tensor = decoded.request.inputs["X"]
    assert type(tensor) is RawInput and tensor.byte_size == 4 and tensor.shape == (2,)


def test_arrays_nested_deeper_than_a_hundred_are_refused():
    data: list = [1]
    for _ in range(100):
        data = [data]
    with pytest.raises(InvalidArgumentError, match="JSON nesting depth exceeds maximum "
                                                   "allowed limit \\(100\\)"):
        _decode([{"name": "X", "shape": [1], "datatype": "INT32", "data": data}])


@pytest.fixture
def region_key():
    key = f"infercore_codec_{uuid.uuid4().hex[:8]}"
    with open(f"/dev/shm/{key}", "wb") as f:
        f.write(b"\0" * (mmap.PAGESIZE + 64))  # a region may start a page in
    yield key
    os.unlink(f"/dev/shm/{key}")


def test_shared_memory_inputs_are_views_of_the_region(region_key):
    registry = SystemSharedMemory()
    registry.register("r", "/" + region_key, 0, 64)
    with open(f"/dev/shm/{region_key}", "r+b") as f:
        f.seek(16)
        f.write(np.array([1, 2, 3, 4], np.int32).tobytes())

    decoded = _decode([{"name": "X", "shape": [4], "datatype": "INT32", "parameters": {
        "shared_memory_region": "r", "shared_memory_offset": 16,
        "shared_memory_byte_size": 16}}], shm=registry)

    assert decoded.request.inputs["X"].to_numpy().tolist() == [1, 2, 3, 4]


def test_unknown_shared_memory_region_is_not_found():
    with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'none'"):
        _decode([{"name": "X", "shape": [1], "datatype": "INT32",
                  "parameters": {"shared_memory_region": "none",
                                 "shared_memory_byte_size": 4}}])


# -- the header cache ------------------------------------------------------------------------
_BINARY_INPUT = {"name": "X", "shape": [2], "datatype": "INT32",
                 "parameters": {"binary_data_size": 8}}


def _binary_body(values: list[int], **extra) -> tuple[bytes, int]:
    body, header_length = _body([_BINARY_INPUT], [{"name": "Y"}],
                                np.array(values, np.int32).tobytes(), **extra)
    assert header_length is not None
    return body, header_length


def test_a_repeated_header_is_replayed_over_the_new_body():
    cache = HeaderCache()
    first = decode_infer("m", 1, *_binary_body([1, 2]), SystemSharedMemory(), cache)
    body, header_length = _binary_body([3, 4])

    second = decode_infer("m", 1, body, header_length, SystemSharedMemory(), cache)

    assert len(cache) == 1
    assert first.request.inputs["X"].to_numpy().tolist() == [1, 2]
    array = second.request.inputs["X"].to_numpy()
    assert array.tolist() == [3, 4] and np.shares_memory(array, np.frombuffer(body, np.uint8))
    assert second.request.requested_outputs == ("Y",) and second.request.model_version == 1


def test_a_replayed_header_still_checks_the_body_size():
    cache = HeaderCache()
    decode_infer("m", -1, *_binary_body([1, 2]), SystemSharedMemory(), cache)
    body, header_length = _binary_body([1, 2])

    with pytest.raises(InvalidArgumentError, match="expecting 4 additional bytes"):
        decode_infer("m", -1, body[:-4], header_length, SystemSharedMemory(), cache)
    with pytest.raises(InvalidArgumentError, match="unexpected additional input data"):
        decode_infer("m", -1, body + b"!", header_length, SystemSharedMemory(), cache)


def test_a_header_with_an_empty_id_is_kept_and_replayed_without_one():
    # perf_analyzer sends "id":"" with every request: the same as no id at all
    cache = HeaderCache()
    decode_infer("m", 1, *_binary_body([1, 2], id=""), SystemSharedMemory(), cache)
    body, header_length = _binary_body([3, 4], id="")

    second = decode_infer("m", 1, body, header_length, SystemSharedMemory(), cache)

    assert len(cache) == 1
    assert second.request.id == "" and second.request.inputs["X"].to_numpy().tolist() == [3, 4]


@pytest.mark.parametrize("extra", [{"id": "r1"}, {"parameters": {"sequence_id": 4}}])
def test_headers_that_change_per_request_are_not_kept(extra):
    cache = HeaderCache()
    decode_infer("m", -1, *_binary_body([1, 2], **extra), SystemSharedMemory(), cache)
    assert len(cache) == 0


def test_headers_with_json_data_are_not_kept():
    cache = HeaderCache()
    body = json.dumps({"inputs": [{"name": "X", "shape": [1], "datatype": "INT32",
                                   "data": [1]}]}).encode()
    decode_infer("m", -1, body, len(body), SystemSharedMemory(), cache)
    assert len(cache) == 0


def test_the_cache_is_bounded():
    cache = HeaderCache(capacity=2)
    for n in range(3):
        body, header_length = _body([dict(_BINARY_INPUT, name=f"X{n}")], binary=b"\0" * 8)
        decode_infer("m", -1, body, header_length, SystemSharedMemory(), cache)
    assert len(cache) == 1


# -- encoding ------------------------------------------------------------------------------
def _response(**outputs: Tensor) -> InferResponse:
    return InferResponse("m", 1, "id-1", dict(outputs), {"p": 1})


def _plan(**plans: OutputPlan) -> DecodedInfer:
    return DecodedInfer(None, dict(plans), False)  # type: ignore[arg-type]


def _no_classes(name: str) -> tuple[list[str], bool]:
    raise AssertionError("no classification expected")


def test_binary_outputs_follow_the_json_header():
    array = np.arange(4, dtype=np.float32)
    encoded = encode_infer(_response(Y=Tensor(DataType.FP32, array)),
                           _plan(Y=OutputPlan("Y", binary=True)), _no_classes)

    header = orjson.loads(encoded.header)
    assert header == {"id": "id-1", "model_name": "m", "model_version": "1",
                      "parameters": {"p": 1}, "outputs": [
                          {"name": "Y", "datatype": "FP32", "shape": [4],
                           "parameters": {"binary_data_size": 16}}]}
    assert bytes(encoded.binary[0]) == array.tobytes()


def test_large_binary_outputs_are_views_of_the_output_arrays():
    array = np.arange(64 * 1024, dtype=np.float32)  # 256 KiB
    encoded = encode_infer(_response(Y=Tensor(DataType.FP32, array)),
                           _plan(Y=OutputPlan("Y", binary=True)), _no_classes)

    assert np.shares_memory(np.frombuffer(encoded.binary[0], np.uint8), array)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_data_is_refused_as_json_in_and_out(datatype):
    with pytest.raises(InvalidArgumentError, match=f"receiving {datatype} data via JSON is "
                                                   "not supported"):
        _decode([{"name": "X", "shape": [1], "datatype": datatype, "data": [1.5]}])
    array = np.array([1.5], ml_dtypes.bfloat16 if datatype == "BF16" else np.float16)
    with pytest.raises(InvalidArgumentError, match=f"sending {datatype} data via JSON is "
                                                   "not supported"):
        encode_infer(_response(A=Tensor(DataType(datatype), array)), _plan(), _no_classes)


def test_json_outputs_are_flat_lists():
    encoded = encode_infer(
        _response(A=Tensor(DataType.INT16, np.array([[1, 2], [3, 4]], np.int16)),
                  B=Tensor(DataType.FP32, np.array([1.5, 0.1], np.float32)),
                  C=Tensor(DataType.BYTES, np.array([b"x", b"yz"], np.object_))),
        _plan(), _no_classes)

    outputs = orjson.loads(encoded.header)["outputs"]
    # FP32 goes back as Triton writes it: each value as a double
    assert [o["data"] for o in outputs] == [[1, 2, 3, 4], [1.5, 0.10000000149011612],
                                            ["x", "yz"]]
    assert encoded.binary == []


def test_json_floats_are_written_in_rapidjsons_notation():
    encoded = encode_infer(
        _response(A=Tensor(DataType.FP64, np.array([np.nan, np.inf, -np.inf, 1e16, 1e-6,
                                                    1e21, 2.5e-7, -0.0]))),
        _plan(), _no_classes)

    assert b'"data":[NaN,Infinity,-Infinity,10000000000000000.0,0.000001,1e21,2.5e-7,-0.0]' \
        in encoded.header


def test_non_utf8_bytes_cannot_go_back_as_json():
    tensor = Tensor(DataType.BYTES, np.array([b"\xff"], np.object_))
    with pytest.raises(InvalidArgumentError, match="request it as binary data"):
        encode_infer(_response(S=tensor), _plan(), _no_classes)


def test_classification_replaces_the_output():
    tensor = Tensor(DataType.FP32, np.array([[0.1, 0.9, 0.5]], np.float32))
    encoded = encode_infer(_response(P=tensor), _plan(P=OutputPlan("P", classification=2)),
                           lambda name: (["a", "b"], True))

    output = orjson.loads(encoded.header)["outputs"][0]
    assert output == {"name": "P", "datatype": "BYTES", "shape": [1, 2],
                      "data": ["0.900000:1:b", "0.500000:2"]}


def test_shared_memory_outputs_are_written_into_the_region(region_key):
    registry = SystemSharedMemory()
    registry.register("r", "/" + region_key, mmap.PAGESIZE, 32)
    plan = OutputPlan("Y", shm=registry.region("r"), shm_offset=4, shm_byte_size=16)
    array = np.array([5, 6, 7, 8], np.int32)

    encoded = encode_infer(_response(Y=Tensor(DataType.INT32, array)), _plan(Y=plan),
                           _no_classes)

    assert orjson.loads(encoded.header)["outputs"][0] == {"name": "Y", "datatype": "INT32",
                                                         "shape": [4]}
    with open(f"/dev/shm/{region_key}", "rb") as f:
        f.seek(mmap.PAGESIZE + 4)
        assert np.frombuffer(f.read(16), np.int32).tolist() == [5, 6, 7, 8]


# -- messages and compression ---------------------------------------------------------------
@pytest.mark.parametrize("header, expected", [
    (None, "identity"), (b"gzip", "gzip"), (b"deflate, gzip", "deflate"),
    (b"gzip;q=0.5, deflate;q=0.8", "deflate"), (b"br", "identity"),
    (b"gzip;q=abc, deflate", "deflate"), (b"identity;q=1, gzip;q=0.9", "identity")])
def test_accept_encoding_picks_the_best_supported_weight(header, expected):
    assert accepted_encoding(header) == expected


@pytest.mark.parametrize("encoding, data", [
    (b"gzip", gzip.compress(b"hello")), (b"deflate", zlib.compress(b"hello")),
    (b"identity", b"hello")])
def test_decompress_understands_gzip_and_zlib_deflate(encoding, data):
    assert decompress(data, encoding, 100) == b"hello"


def test_decompress_refuses_unknown_encodings_and_bombs():
    with pytest.raises(UnsupportedError, match="Unsupported compression type"):
        decompress(b"x", b"br", 100)
    with pytest.raises(UnsupportedError, match="Unsupported compression type"):
        decompress(gzip.compress(b"x"), b"GZIP", 100)  # matched as Triton matches it
    with pytest.raises(InvalidArgumentError, match="exceeds the maximum allowed value"):
        decompress(gzip.compress(b" " * 1000), b"gzip", 100)
    corrupt_after_a_while = bytearray(gzip.compress(bytes(range(256)) * 200, 1))
    corrupt_after_a_while[-300:] = b"\xff" * 300
    with pytest.raises(InvalidArgumentError, match="exceeds the maximum allowed value"):
        decompress(bytes(corrupt_after_a_while), b"gzip", 1000)


def test_data_that_does_not_inflate_is_what_inflated_before():
    # Triton passes on what inflated, without an error (conformance: corrupt_gzip,
    # truncated_gzip, deflate_raw_stream)
    data = bytes(range(256)) * 64
    cut = decompress(gzip.compress(data)[:-40], b"gzip", 1 << 20)
    assert 0 < len(cut) < len(data) and data.startswith(cut)
    assert decompress(b"\x1f\x8b\x08\x00garbage", b"gzip", 100) == b""
    assert decompress(zlib.compress(b"hello")[2:-4], b"deflate", 100) == b""


def test_compress_round_trips_through_each_encoding():
    parts = [b"head", memoryview(b"-body")]
    assert gzip.decompress(compress(parts, "gzip")) == b"head-body"
    assert zlib.decompress(compress(parts, "deflate")) == b"head-body"


def test_serialize_head_frames_the_response():
    response = HttpResponse(404, (b"{}",), extra_headers=b"x-a: 1\r\n")
    assert serialize_head(response, 2, keep_alive=False) == (
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\ncontent-type: application/json\r\n"
        b"x-a: 1\r\nconnection: close\r\n\r\n")


# -- classification ------------------------------------------------------------------------
def test_classification_prints_integers_as_integers_and_keeps_ties_in_index_order():
    tensor = Tensor(DataType.INT32, np.array([3, 9, 3, 1], np.int32))

    classes = classify(tensor, 3, ["a", "b"], batched=False)

    assert classes.to_bytes_array().tolist() == [b"9:1:b", b"3:0:a", b"3:2"]


def test_classification_of_a_batch_is_per_item_and_clamps_k():
    tensor = Tensor(DataType.FP64, np.array([[1.0, 2.0], [4.0, 3.0]]))

    classes = classify(tensor, 5, [], batched=True)

    assert classes.shape == (2, 2)
    assert classes.to_bytes_array()[1].tolist() == [b"4.000000:0", b"3.000000:1"]


def test_classification_of_an_empty_batch_is_empty():
    classes = classify(Tensor(DataType.FP32, np.zeros((0, 3), np.float32)), 2, [],
                       batched=True)
    assert classes.shape == (0, 2)


@pytest.mark.parametrize("data_type, dtype", [(DataType.FP16, np.float16),
                                              (DataType.BOOL, np.bool_)])
def test_classification_of_unordered_types_is_refused(data_type, dtype):
    with pytest.raises(InvalidArgumentError, match=f"unsupported type '{data_type}'"):
        classify(Tensor(data_type, np.zeros(2, dtype)), 1, [], batched=False)
