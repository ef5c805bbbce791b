"""``request.parameters()``'s text, as Triton's Python backend writes it (TritonJson, i.e.
rapidjson's Writer): the texts below are what Triton 2.51 handed its models
(tests/conformance/cases/qa_python_parameters.py records them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infercore.backends.python.pb_json import triton_json
from infercore.backends.python.pb_utils.request import InferenceRequest
from infercore.backends.python.pb_utils.tensor import Tensor
from infercore.request import InferRequest
from infercore.tensor import Tensor as CoreTensor


@pytest.mark.parametrize(
    ("parameters", "text"),
    [
        ({}, "{}"),
        ({"b": True, "i": 7, "s": "text", "d": 0.5}, '{"b":true,"i":7,"s":"text","d":0.5}'),
        ({"neg": -3, "zero": 0, "f": False}, '{"neg":-3,"zero":0,"f":false}'),
        ({"d": 2.0, "e": 1e-7, "big": 1.5e300}, '{"d":2.0,"e":1e-7,"big":1.5e300}'),
        ({"z": 1, "a": 2, "m": 3}, '{"z":1,"a":2,"m":3}'),  # the request's order
        ({"big": 9223372036854775807}, '{"big":9223372036854775807}'),
        ({"v": 1e23}, '{"v":9.999999999999999e22}'),  # Grisu2's digits, not the shortest
        ({"v": 9.5e-5}, '{"v":0.000095}'),
        ({"v": 5e-324}, '{"v":5e-324}'),
        ({"v": 1.7976931348623157e308}, '{"v":1.7976931348623157e308}'),
        (
            {"v": 0.3, "w": -0.001, "x": 1e16, "y": 1e21},
            '{"v":0.3,"w":-0.001,"x":10000000000000000.0,"y":1e21}',
        ),
        ({"s": 'quote " back \\ tab \t é ✓'}, '{"s":"quote \\" back \\\\ tab \\t é ✓"}'),
    ],
)
def test_parameters_are_written_as_tritonjson_writes_them(parameters, text):
    assert triton_json(parameters) == text
    assert json.loads(text) == parameters


def test_nan_and_infinities_are_written_as_tritonjson_writes_them():
    # what Triton 2.51's models saw from a generate body with them (generate_bodies suite)
    text = triton_json({"t": float("inf"), "u": float("-inf"), "v": float("nan")})
    assert text == '{"t":Infinity,"u":-Infinity,"v":NaN}'


def test_control_characters_are_escaped_in_upper_case_hex():
    assert triton_json({"c": "\x01\x1f\n"}) == '{"c":"\\u0001\\u001F\\n"}'


def test_a_request_the_model_received_reads_as_triton_writes_it_one_it_made_as_json_dumps():
    core = InferRequest(
        model_name="m",
        inputs={"IN": CoreTensor.from_numpy(np.zeros(1, np.float32))},
        parameters={"a": 1, "b": "x"},
    )
    received = InferenceRequest._wrap(core, ["OUT"], decoupled=False)
    assert received.parameters() == '{"a":1,"b":"x"}'
    made = InferenceRequest(
        model_name="m",
        requested_output_names=["OUT"],
        inputs=[Tensor("IN", np.zeros(1, np.float32))],
        parameters={"a": 1, "b": "x"},
    )
    assert made.parameters() == '{"a": 1, "b": "x"}'  # the stub's json.dumps
