"""The generate extension's mapping: request keys -> inputs and parameters (shapes from
the model's metadata), and one response -> a flat JSON object."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from infercore import DataType, InferResponse, InvalidArgumentError, Tensor
from infercore.frontends.http_generate import decode_generate, encode_generate

INPUTS = {
    "text_input": {"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]},
    "pair": {"name": "pair", "datatype": "INT32", "shape": [2, -1]},
    "fixed": {"name": "fixed", "datatype": "FP32", "shape": [2, 2]},
    "tail": {"name": "tail", "datatype": "INT64", "shape": [-1, -1, 2]},
}


def _shape(name: str, value: object) -> list[int]:
    request = decode_generate("m", -1, {name: value}, INPUTS)
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
    request = decode_generate("m", 2, {
        "id": "r", "text_input": "x", "temperature": 0.2, "stream": True,
        "parameters": {"pair": [1, 2], "max_tokens": 8, "stop": "."}}, INPUTS)

    assert request.model_name == "m" and request.model_version == 2 and request.id == "r"
    assert sorted(request.inputs) == ["pair", "text_input"]
    assert request.inputs["pair"].to_numpy().tolist() == [[1], [2]]
    assert request.inputs["text_input"].to_numpy().tolist() == [[b"x"]]
    assert request.parameters == {"id": "r", "temperature": 0.2, "stream": True,
                                  "max_tokens": 8, "stop": "."}


@pytest.mark.parametrize("document, message", [
    ({"text_input": "a", "parameters": {"text_input": "b"}},
     "Converting keyword: 'parameters': input 'text_input' already exists in request"),
    ({"parameters": [1]}, "Expected JSON object for keyword: 'parameters': attempt to "
                          "access JSON non-object as object"),
    ({"seed": {"a": 1}}, "parameter 'seed' has invalid type. It should be either 'int', "
                         "'bool', or 'string'."),
    ({"text_input": 3}, "Unable to parse 'data': attempt to access JSON non-string as string"),
])
def test_bad_documents_are_refused(document, message):
    with pytest.raises(InvalidArgumentError) as raised:
        decode_generate("m", -1, document, INPUTS)
    assert raised.value.message == message


def test_parameters_cannot_also_be_an_input_name():
    inputs = {"parameters": {"name": "parameters", "datatype": "INT32", "shape": [1]}}
    with pytest.raises(InvalidArgumentError, match="Keyword 'parameters' for nested schema "
                                                   "also given as input tensor name"):
        decode_generate("m", -1, {"parameters": {}}, inputs)


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


def test_bytes_that_are_not_utf8_cannot_be_sent_as_json():
    response = InferResponse("m", 1, outputs={
        "raw": Tensor(DataType.BYTES, np.array([b"\xff"], np.object_))})
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8"):
        encode_generate(response)
