"""The generate extension's mapping: request keys -> inputs and parameters (shapes from
the model's metadata), and one response -> a flat JSON object, as Triton maps them."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from infercore import (
    DataType,
    InferResponse,
    InternalError,
    InvalidArgumentError,
    Tensor,
    TritonError,
)
from infercore.frontends.http.generate import decode_generate, encode_generate
from infercore.frontends.http.json import parse_json

INPUTS = {
    "text_input": {"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]},
    "pair": {"name": "pair", "datatype": "INT32", "shape": [2, -1]},
    "fixed": {"name": "fixed", "datatype": "FP32", "shape": [2, 2]},
    "tail": {"name": "tail", "datatype": "INT64", "shape": [-1, -1, 2]},
}


def _decode(document: object, inputs=INPUTS, version: int = -1):
    body = document if isinstance(document, bytes) else orjson.dumps(document)
    return decode_generate("m", version, parse_json(body), inputs)


def _shape(name: str, value: object) -> list[int]:
    request = _decode({name: value})
    return list(request.inputs[name].shape)


@pytest.mark.parametrize("name, value, shape", [
    ("text_input", "hi", [1, 1]),
    ("text_input", ["a", "b"], [2, 1]),
    ("pair", [1, 2, 3, 4, 5, 6], [2, 3]),
    ("pair", [], [2, 0]),
    ("fixed", [1, 2, 3, 4], [2, 2]),
    ("tail", [1, 2, 3, 4, 5, 6], [1, 3, 2]),  # the innermost variable dimension takes all
])
def test_inputs_are_shaped_from_the_metadata(name, value, shape):
    assert _shape(name, value) == shape


@pytest.mark.parametrize("name, value", [
    ("tail", [1, 2, 3]), ("pair", [1, 2, 3]), ("fixed", [1, 2]), ("fixed", []),
])
def test_values_that_fit_no_shape_are_refused_with_tritons_text(name, value):
    with pytest.raises(InvalidArgumentError) as raised:
        _shape(name, value)
    assert raised.value.message == (
        f"The schema can not convert input '{name}' to tensor with proper shape")


def test_other_keys_and_the_parameters_object_become_parameters_or_inputs():
    request = _decode({
        "id": "r", "text_input": "x", "temperature": 0.2, "stream": True,
        "parameters": {"pair": [1, 2], "max_tokens": 8, "stop": "."}}, version=2)

    assert request.model_name == "m" and request.model_version == 2 and request.id == "r"
    assert sorted(request.inputs) == ["pair", "text_input"]
    assert request.inputs["pair"].to_numpy().tolist() == [[1], [2]]
    assert request.inputs["text_input"].to_numpy().tolist() == [[b"x"]]
    assert request.parameters == {"id": "r", "temperature": 0.2, "stream": True,
                                  "max_tokens": 8, "stop": "."}


@pytest.mark.parametrize("document, error, message", [
    ({"text_input": "a", "parameters": {"text_input": "b"}}, InvalidArgumentError,
     "Converting keyword: 'parameters': [request id: <id_unknown>] input 'text_input' "
     "already exists in request"),
    (b'{"id": "r", "text_input": "a", "text_input": "b"}', InvalidArgumentError,
     "[request id: r] input 'text_input' already exists in request"),
    ({"parameters": [1]}, InternalError, "Expected JSON object for keyword: 'parameters': "
                                         "attempt to access JSON non-object as object"),
    ({"seed": {"a": 1}}, InvalidArgumentError, "parameter 'seed' has invalid type. It "
                                               "should be either 'int', 'bool', or 'string'."),
    ({"text_input": 3}, InternalError,
     "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
    ({"pair": [1, "2"]}, InternalError,
     "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    ({"pair": [[1, 2], [3, 4]]}, InternalError,
     "Unable to parse 'data': Shape does not match true shape of 'data' field"),
    ({"fixed": [True, 1, 2, 3]}, InternalError,
     "Unable to parse 'data': attempt to access JSON non-number as double"),
    ({"text_input": [["a", "b"]]}, InvalidArgumentError,
     "[request id: <id_unknown>] unexpected number of string elements 2 for inference "
     "input 'text_input' for model 'm', expecting 1"),
    ({"id": 7}, InternalError, "Unable to parse 'id': attempt to access JSON non-string as "
                               "string"),
    (["text_input"], InternalError, "attempt to get members for non-object"),
])
def test_bad_documents_are_refused_with_tritons_texts_and_codes(document, error, message):
    with pytest.raises(TritonError) as raised:
        _decode(document)
    assert type(raised.value) is error and raised.value.message == message


def test_a_duplicated_key_is_visited_again_with_its_first_value():
    request = _decode(b'{"text_input": "x", "seed": 1, "seed": 2, "parameters": {"k": 1}, '
                      b'"parameters": {"k": 2, "j": 3}}')
    assert request.parameters == {"seed": 1, "k": 1}


def test_parameters_are_typed_as_triton_types_them():
    request = _decode(b'{"text_input": "x", "big": 18446744073709551615, "t": NaN}')
    assert request.parameters["big"] == 1.8446744073709552e19
    assert request.parameters["t"] != request.parameters["t"]


def test_parameters_cannot_also_be_an_input_name():
    inputs = {"parameters": {"name": "parameters", "datatype": "INT32", "shape": [1]}}
    with pytest.raises(InvalidArgumentError, match="Keyword 'parameters' for nested schema "
                                                   "also given as input tensor name"):
        _decode({"parameters": {}}, inputs)


def test_a_response_is_one_flat_object_single_elements_unwrapped():
    response = InferResponse("m", 3, "req", outputs={
        "text_output": Tensor(DataType.BYTES, np.array([[b"hello"]], np.object_)),
        "scores": Tensor.from_numpy(np.array([[0.5, 0.25]], np.float32)),
        "count": Tensor.from_numpy(np.array([7], np.int64)),
        "done": Tensor.from_numpy(np.array([True])),
        "model_name": Tensor.from_numpy(np.array([1], np.int32)),  # the reserved name wins
    }, parameters={"finish_reason": "stop", "model_version": "x"})

    assert orjson.loads(encode_generate(response)) == {
        "id": "req", "model_name": "m", "model_version": "3", "finish_reason": "stop",
        "text_output": "hello", "scores": [0.5, 0.25], "count": 7, "done": True}


def test_keys_are_written_in_byte_order_and_floats_as_rapidjson_writes_them():
    response = InferResponse("m", 1, "r", outputs={
        "zeta": Tensor.from_numpy(np.array([0.1, 3e38], np.float32)),
        "Alpha": Tensor.from_numpy(np.array([np.nan, np.inf, 1e21])),
    })
    assert encode_generate(response) == (
        b'{"Alpha":[NaN,Infinity,1e21],"id":"r","model_name":"m","model_version":"1",'
        b'"zeta":[0.10000000149011612,3.0000000054977559e38]}')


def test_bytes_that_are_not_utf8_are_written_as_they_are():
    response = InferResponse("m", 1, outputs={
        "raw": Tensor(DataType.BYTES, np.array([b"\xff\x01"], np.object_))})
    assert encode_generate(response) == (
        b'{"model_name":"m","model_version":"1","raw":"\xff\\u0001"}')


def test_half_precision_outputs_cannot_be_sent_as_json():
    response = InferResponse("m", 1, outputs={
        "half": Tensor.from_numpy(np.array([1.5], np.float16))})
    with pytest.raises(InvalidArgumentError, match="sending FP16 data via JSON is not"):
        encode_generate(response)
