"""Batch assembly for Python models: payloads of several requests built by hand, executed
through PythonInstance.execute as the engine does, one assembled execute() per payload."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from test_python_backend import Harness, execute, only, request
from tritonclient.grpc import model_config_pb2

from infercore import Server
from infercore.backends.python.batch_assembly import (
    AssembledRequest,
    batch_assembly_from_config,
)
from infercore.errors import InternalError, InvalidArgumentError
from infercore.response import InferResponse, ResponseStream
from infercore.tensor import MemoryType
from infercore.testing import RepositoryBuilder

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "models"

ASSEMBLE = 'parameters: { key: "infercore.batch_assembly" value: { string_value: "concat" } }\n'


def _param(key: str, value: str) -> str:
    return f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path)
    yield h
    h.close()


def f32(rows: int, start: float = 0.0, width: int = 4) -> np.ndarray:
    return (np.arange(rows * width, dtype=np.float32) + start).reshape(rows, width)


def _errors(streams: list[ResponseStream]) -> list[InternalError]:
    errors = []
    for stream in streams:
        error = only(stream).error
        assert isinstance(error, InternalError), error
        errors.append(error)
    return errors


# -- the probe model: records what execute receives ------------------------------------------
PROBE_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 16
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [
  { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "Z", data_type: TYPE_FP32, dims: [ 1 ] }
]
""" + ASSEMBLE

PROBE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = []

    def execute(self, batch):
        x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
        self.calls.append(
            {
                "batch": batch,
                "x": x,
                "sizes": batch.batch_sizes(),
                "total": batch.batch_size(),
                "slices": batch.batch_slices(),
                "wanted": batch.requested_output_names(),
                "names": [t.name() for t in batch.inputs()],
            }
        )
        self.y = x * 2
        self.z = x.sum(axis=1, keepdims=True)
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("Y", self.y), pb_utils.Tensor("Z", self.z)],
            parameters={"rows": int(x.shape[0])},
        )
"""


def test_requests_of_different_batch_sizes_are_concatenated_along_dim_0(harness: Harness):
    _, (instance,) = harness.load("m", PROBE_PY, PROBE_CONFIG)
    xs = [f32(1, 0), f32(3, 100), f32(2, 200)]
    pairs = [request("m", {"X": x}, id=f"r{i}") for i, x in enumerate(xs)]
    execute(instance, *(core for core, _ in pairs))
    (call,) = instance._object.calls  # one execute for the whole payload
    assert isinstance(call["batch"], AssembledRequest)
    np.testing.assert_array_equal(call["x"], np.concatenate(xs))
    assert call["x"].shape == (6, 4)
    assert call["sizes"] == [1, 3, 2] and call["total"] == 6
    assert call["slices"] == [slice(0, 1), slice(1, 4), slice(4, 6)]
    assert call["names"] == ["X"]
    assert [r.request_id() for r in call["batch"].requests()] == ["r0", "r1", "r2"]
    for x, (_, stream) in zip(xs, pairs, strict=True):
        response = only(stream)
        assert response.error is None
        assert response.outputs["Y"].shape == x.shape  # each request's own batch size
        np.testing.assert_array_equal(response.outputs["Y"].to_numpy(), x * 2)
        np.testing.assert_array_equal(response.outputs["Z"].to_numpy(), x.sum(1, keepdims=True))
        assert response.parameters == {"rows": 6}


def test_each_request_gets_a_view_of_the_model_output(harness: Harness):
    _, (instance,) = harness.load("m", PROBE_PY, PROBE_CONFIG)
    pairs = [request("m", {"X": f32(n, 10 * n)}) for n in (2, 1, 4, 3)]
    execute(instance, *(core for core, _ in pairs))
    y = instance._object.y
    start = 0
    for n, (_, stream) in zip((2, 1, 4, 3), pairs, strict=True):
        out = only(stream).outputs["Y"].to_numpy()
        assert np.shares_memory(out, y)  # a slice, not a copy
        assert out.__array_interface__["data"][0] == y[start:].__array_interface__["data"][0]
        start += n


def test_a_one_request_payload_hands_the_model_its_own_input(harness: Harness):
    _, (instance,) = harness.load("m", PROBE_PY, PROBE_CONFIG)
    x = f32(3)
    core, stream = request("m", {"X": x})
    execute(instance, core)
    (call,) = instance._object.calls
    assert call["x"] is x  # not even a view: the request's array itself
    assert call["sizes"] == [3]
    out = only(stream).outputs["Y"].to_numpy()
    assert out is instance._object.y


def test_each_request_gets_only_the_outputs_it_asked_for(harness: Harness):
    _, (instance,) = harness.load("m", PROBE_PY, PROBE_CONFIG)
    only_y, y_stream = request("m", {"X": f32(1)}, requested_outputs=["Y"])
    only_z, z_stream = request("m", {"X": f32(2)}, requested_outputs=["Z"])
    every, every_stream = request("m", {"X": f32(1)})
    execute(instance, only_y, only_z, every)
    assert instance._object.calls[0]["wanted"] == ["Y", "Z"]
    assert set(only(y_stream).outputs) == {"Y"}
    assert set(only(z_stream).outputs) == {"Z"}
    assert set(only(every_stream).outputs) == {"Y", "Z"}
    # the model is told the union of what the batch asked for, in config order
    a, a_stream = request("m", {"X": f32(1)}, requested_outputs=["Z"])
    b, b_stream = request("m", {"X": f32(1)}, requested_outputs=["Z"])
    execute(instance, a, b)
    assert instance._object.calls[1]["wanted"] == ["Z"]
    assert set(only(a_stream).outputs) == set(only(b_stream).outputs) == {"Z"}


def test_models_without_the_parameter_keep_receiving_a_list(harness: Harness):
    model_py = """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            self.received = requests
            return [
                pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")])
                for r in requests
            ]
    """
    config = PROBE_CONFIG.replace(ASSEMBLE, "").replace('"Y"', '"X"')
    none_config = PROBE_CONFIG.replace('"concat"', '"none"').replace('"Y"', '"X"')
    for name, text in (("plain", config), ("off", none_config)):
        _, (instance,) = harness.load(name, model_py, text.replace('"m"', f'"{name}"'))
        assert instance._assembly is None
        pairs = [request(name, {"X": f32(n)}) for n in (1, 2)]
        execute(instance, *(core for core, _ in pairs))
        received = instance._object.received
        assert isinstance(received, list) and len(received) == 2
        for n, (_, stream) in zip((1, 2), pairs, strict=True):
            assert only(stream).outputs["X"].shape == (n, 4)


def test_the_batch_is_cancelled_only_when_every_request_is(harness: Harness):
    model_py = """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.seen = []

        def execute(self, batch):
            self.seen.append(
                (batch.is_cancelled(), [r.is_cancelled() for r in batch.requests()])
            )
            x = pb_utils.get_input_tensor_by_name(batch, "X")
            return pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.as_numpy())])
    """
    _, (instance,) = harness.load("m", model_py, PROBE_CONFIG)
    (a, _), (b, _) = request("m", {"X": f32(1)}), request("m", {"X": f32(1)})
    a.cancel()
    execute(instance, a, b)
    b.cancel()
    execute(instance, a, b)
    assert instance._object.seen == [(False, [True, False]), (True, [True, True])]


# -- per-request metadata ----------------------------------------------------------------
def test_the_originals_carry_ids_and_parameters_the_batch_has_none(harness: Harness):
    model_py = """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, batch):
            try:
                batch.request_id()
            except pb_utils.TritonModelException as exc:
                self.refused = str(exc)
            ids = [r.request_id() + ":" + json.loads(r.parameters())["tag"]
                   for r in batch.requests()]
            rows = np.repeat(np.array(ids, dtype=np.object_), batch.batch_sizes())
            return pb_utils.InferenceResponse([pb_utils.Tensor("IDS", rows.reshape(-1, 1))])
    """
    config = """
    name: "m"
    backend: "python"
    max_batch_size: 8
    input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
    output [ { name: "IDS", data_type: TYPE_STRING, dims: [ 1 ] } ]
    """ + ASSEMBLE
    _, (instance,) = harness.load("m", model_py, config)
    a, a_stream = request("m", {"X": f32(2)}, id="a", parameters={"tag": "x"})
    b, b_stream = request("m", {"X": f32(1)}, id="b", parameters={"tag": "y"})
    execute(instance, a, b)
    assert only(a_stream).outputs["IDS"].to_bytes_array().tolist() == [[b"a:x"], [b"a:x"]]
    assert only(b_stream).outputs["IDS"].to_bytes_array().tolist() == [[b"b:y"]]
    assert instance._object.refused == (
        "request_id() is not defined for an assembled batch of 2 request(s) of model 'm'; "
        "read it from each of requests()"
    )


# -- ragged inputs and padding ----------------------------------------------------------------
RAGGED_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 16
input [
  { name: "TOKENS", data_type: TYPE_INT64, dims: [ -1 ], allow_ragged_batch: true },
  { name: "MASK", data_type: TYPE_FP32, dims: [ -1 ], allow_ragged_batch: true }
]
output [
  { name: "TOTAL", data_type: TYPE_INT64, dims: [ 1 ] },
  { name: "ECHO", data_type: TYPE_INT64, dims: [ -1 ] }
]
"""

RAGGED_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, batch):
        self.calls += 1
        tokens = pb_utils.get_input_tensor_by_name(batch, "TOKENS").as_numpy()
        self.tokens = tokens
        self.mask = pb_utils.get_input_tensor_by_name(batch, "MASK").as_numpy()
        self.shapes = batch.original_shapes("TOKENS")
        self.lengths = batch.item_shapes("TOKENS")[:, 0]
        self.padded = (batch.is_padded(), batch.is_padded("TOKENS"))
        valid = np.arange(tokens.shape[1])[None, :] < self.lengths[:, None]
        total = np.where(valid, tokens, 0).sum(axis=1, keepdims=True)
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor("TOTAL", total), pb_utils.Tensor("ECHO", tokens)]
        )
"""


def _tokens(*rows: list[int]) -> dict[str, np.ndarray]:
    tokens = np.array(rows, dtype=np.int64)
    return {"TOKENS": tokens, "MASK": np.ones(tokens.shape, dtype=np.float32)}


def test_ragged_inputs_without_a_pad_value_fail_every_request(harness: Harness):
    config = RAGGED_CONFIG.replace("allow_ragged_batch: true", "allow_ragged_batch: false")
    _, (instance,) = harness.load("m", RAGGED_PY, config + ASSEMBLE)
    pairs = [
        request("m", _tokens([1, 2, 3]), id="a"),
        request("m", _tokens([1, 2], [3, 4]), id="b"),
        request("m", _tokens([4, 5, 6, 7, 8]), id="c"),
    ]
    execute(instance, *(core for core, _ in pairs))
    for error in _errors([stream for _, stream in pairs]):
        assert error.message == (
            "Failed to process the request(s) for model 'm_0', message: batch assembly: "
            "input 'TOKENS' is [1, 3] in request 0 (id 'a') and [2, 2] in request 1 (id 'b'): "
            "the requests of an assembled batch must agree on every dimension but the first, "
            "unless the model sets a pad value ('infercore.batch_padding' or "
            "'infercore.batch_padding.TOKENS')"
        )
    assert instance._object.calls == 0


def test_padding_pads_to_the_longest_and_tells_the_original_shapes(harness: Harness):
    config = (
        RAGGED_CONFIG
        + ASSEMBLE
        + _param("infercore.batch_padding", "0")
        + _param("infercore.batch_padding.TOKENS", "-1")
    )
    _, (instance,) = harness.load("m", RAGGED_PY, config)
    pairs = [
        request("m", _tokens([1, 2, 3])),
        request("m", _tokens([1, 1, 1, 1, 1], [2, 2, 2, 2, 2])),
        request("m", _tokens([7, 8])),
    ]
    execute(instance, *(core for core, _ in pairs))
    model = instance._object
    np.testing.assert_array_equal(
        model.tokens,
        [[1, 2, 3, -1, -1], [1, 1, 1, 1, 1], [2, 2, 2, 2, 2], [7, 8, -1, -1, -1]],
    )
    np.testing.assert_array_equal(  # the default pad value for the other input
        model.mask, [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    )
    assert model.shapes == [(1, 3), (2, 5), (1, 2)]
    assert model.lengths.tolist() == [3, 5, 5, 2] and model.lengths.dtype == np.int64
    assert model.padded == (True, True)
    totals = [only(stream).outputs for _, stream in pairs]
    assert [t["TOTAL"].to_numpy().tolist() for t in totals] == [[[6]], [[5], [10]], [[15]]]
    # outputs are split along dim 0 only: a padded output keeps the batch's padded extent
    assert [t["ECHO"].shape for t in totals] == [(1, 5), (2, 5), (1, 5)]
    assert totals[2]["ECHO"].to_numpy().tolist() == [[7, 8, -1, -1, -1]]


def test_equal_shapes_are_not_padded_even_with_a_pad_value(harness: Harness):
    config = RAGGED_CONFIG + ASSEMBLE + _param("infercore.batch_padding", "0")
    _, (instance,) = harness.load("m", RAGGED_PY, config)
    pairs = [request("m", _tokens([1, 2])), request("m", _tokens([3, 4]))]
    execute(instance, *(core for core, _ in pairs))
    assert instance._object.padded == (False, False)
    assert instance._object.tokens.shape == (2, 2)


def test_padding_works_along_every_variable_dim(harness: Harness):
    model_py = """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, batch):
            self.image = pb_utils.get_input_tensor_by_name(batch, "IMAGE").as_numpy()
            self.sizes = batch.item_shapes("IMAGE")
            return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", self.image)])
    """
    config = """
    name: "m"
    backend: "python"
    max_batch_size: 4
    input [ { name: "IMAGE", data_type: TYPE_UINT8, dims: [ -1, -1 ] } ]
    output [ { name: "OUT", data_type: TYPE_UINT8, dims: [ -1, -1 ] } ]
    """ + ASSEMBLE + _param("infercore.batch_padding", "255")
    _, (instance,) = harness.load("m", model_py, config)
    a = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
    b = np.arange(3, dtype=np.uint8).reshape(1, 3, 1)
    (ca, sa), (cb, sb) = request("m", {"IMAGE": a}), request("m", {"IMAGE": b})
    execute(instance, ca, cb)
    image = instance._object.image
    assert image.shape == (2, 3, 3)
    np.testing.assert_array_equal(image[0], [[0, 1, 2], [3, 4, 5], [255, 255, 255]])
    np.testing.assert_array_equal(image[1], [[0, 255, 255], [1, 255, 255], [2, 255, 255]])
    assert instance._object.sizes.tolist() == [[2, 3], [3, 1]]
    assert only(sa).outputs["OUT"].shape == only(sb).outputs["OUT"].shape == (1, 3, 3)


def test_a_missing_optional_input_in_some_requests_fails_every_request(harness: Harness):
    config = """
    name: "m"
    backend: "python"
    max_batch_size: 8
    input [
      { name: "X", data_type: TYPE_FP32, dims: [ 4 ] },
      { name: "BIAS", data_type: TYPE_FP32, dims: [ 4 ], optional: true }
    ]
    output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
    """ + ASSEMBLE
    _, (instance,) = harness.load("m", PROBE_PY, config)
    with_bias, s1 = request("m", {"X": f32(1), "BIAS": f32(1)}, id="a")
    without, s2 = request("m", {"X": f32(1)}, id="b")
    execute(instance, with_bias, without)
    for error in _errors([s1, s2]):
        assert error.message.endswith(
            "batch assembly: input 'BIAS' is given by request 0 (id 'a') but not by request 1 "
            "(id 'b'); the requests of an assembled batch must give the same inputs"
        )
    assert instance._object.calls == []


# -- BYTES ------------------------------------------------------------------------------------
BYTES_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ -1 ] } ]
output [ { name: "UPPER", data_type: TYPE_STRING, dims: [ -1 ] } ]
""" + ASSEMBLE

BYTES_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, batch):
        text = pb_utils.get_input_tensor_by_name(batch, "TEXT").as_numpy()
        self.text = text
        upper = np.array([item.decode().upper() for item in text.flat], dtype=np.object_)
        return pb_utils.InferenceResponse([pb_utils.Tensor("UPPER", upper.reshape(text.shape))])
"""


def test_bytes_inputs_concatenate_and_outputs_split(harness: Harness):
    _, (instance,) = harness.load("m", BYTES_PY, BYTES_CONFIG)
    a = np.array([[b"ab", b"c"]], dtype=np.object_)
    b = np.array([[b"de", b""], [b"f", "ü".encode()]], dtype=np.object_)
    (ca, sa), (cb, sb) = request("m", {"TEXT": a}), request("m", {"TEXT": b})
    execute(instance, ca, cb)
    assert instance._object.text.dtype == np.object_
    assert instance._object.text.tolist() == [[b"ab", b"c"], [b"de", b""], [b"f", "ü".encode()]]
    assert only(sa).outputs["UPPER"].to_bytes_array().tolist() == [[b"AB", b"C"]]
    assert only(sb).outputs["UPPER"].to_bytes_array().tolist() == [
        [b"DE", b""],
        [b"F", "Ü".encode()],
    ]


def test_ragged_bytes_inputs_are_padded_with_the_pad_text(harness: Harness):
    config = BYTES_CONFIG + _param("infercore.batch_padding", "<pad>")
    _, (instance,) = harness.load("m", BYTES_PY, config)
    a = np.array([[b"x"]], dtype=np.object_)
    b = np.array([[b"y", b"z"]], dtype=np.object_)
    (ca, sa), (cb, sb) = request("m", {"TEXT": a}), request("m", {"TEXT": b})
    execute(instance, ca, cb)
    assert instance._object.text.tolist() == [[b"x", b"<pad>"], [b"y", b"z"]]
    assert only(sa).outputs["UPPER"].to_bytes_array().tolist() == [[b"X", b"<PAD>"]]
    assert only(sb).outputs["UPPER"].to_bytes_array().tolist() == [[b"Y", b"Z"]]


# -- what execute returns ---------------------------------------------------------------------
def _returning(body: str) -> str:
    return f"""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, batch):
            x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
            {body}
    """


def _run_three(harness: Harness, body: str) -> list[InferResponse]:
    _, (instance,) = harness.load("m", _returning(body), PROBE_CONFIG)
    pairs = [request("m", {"X": f32(n)}) for n in (2, 1, 3)]
    execute(instance, *(core for core, _ in pairs))
    return [only(stream) for _, stream in pairs]


def test_an_output_whose_dim_0_is_not_the_batch_size_fails_every_request(harness: Harness):
    responses = _run_three(
        harness, 'return pb_utils.InferenceResponse([pb_utils.Tensor("Y", x[:5])])'
    )
    for response in responses:
        assert isinstance(response.error, InternalError)
        assert response.error.message == (
            "Failed to process the request(s) for model 'm_0', message: batch assembly: "
            "output 'Y' has shape [5, 4], but its first dimension must be the batch size 6 "
            "of the assembled batch (the requests' batch sizes are [2, 1, 3]) to be split back "
            "per request"
        )


def test_an_error_response_reaches_every_request_with_its_code(harness: Harness):
    responses = _run_three(
        harness,
        'return pb_utils.InferenceResponse(error=pb_utils.TritonError("bad batch", '
        "pb_utils.TritonError.INVALID_ARG))",
    )
    errors = [response.error for response in responses]
    assert all(isinstance(e, InvalidArgumentError) and e.message == "bad batch" for e in errors)
    assert len({id(e) for e in errors}) == 3  # one error object per request


def test_an_exception_fails_every_request_with_tritons_text(harness: Harness):
    responses = _run_three(harness, 'raise ValueError("no batch today")')
    for response in responses:
        assert isinstance(response.error, InternalError)
        message = response.error.message
        assert message.startswith(
            "Failed to process the request(s) for model 'm_0', message: ValueError: no batch "
            "today\n\nAt:\n"
        )
        assert "model.py(" in message and "): execute" in message


def test_a_list_of_one_response_is_split_like_a_response(harness: Harness):
    responses = _run_three(
        harness, 'return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)])]'
    )
    assert [r.outputs["Y"].shape for r in responses] == [(2, 4), (1, 4), (3, 4)]
    np.testing.assert_array_equal(responses[2].outputs["Y"].to_numpy(), f32(3) + 1)


def test_one_response_per_original_request_is_sent_as_is(harness: Harness):
    body = """return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Z", r.inputs()[0].as_numpy().sum(axis=1, keepdims=True))]
                )
                for r in batch.requests()
            ]"""
    responses = _run_three(harness, body)
    for n, response in zip((2, 1, 3), responses, strict=True):
        np.testing.assert_array_equal(
            response.outputs["Z"].to_numpy(), f32(n).sum(axis=1, keepdims=True)
        )


@pytest.mark.parametrize(
    ("body", "ending"),
    [
        (
            "return [pb_utils.InferenceResponse([]), pb_utils.InferenceResponse([])]",
            "batch assembly: execute returned a list of 2 item(s) for an assembled batch of 3 "
            "request(s); return one InferenceResponse for the batch, or one per request of "
            "requests()",
        ),
        (
            "return {}",
            "batch assembly: expected an 'InferenceResponse' object for the assembled batch "
            "in the execute return, found type '<class 'dict'>'.",
        ),
        (
            "return None",
            "batch assembly: execute returned None and sent no response for this request; "
            "return one InferenceResponse for the assembled batch",
        ),
    ],
)
def test_malformed_returns_fail_every_request(harness: Harness, body, ending):
    for response in _run_three(harness, body):
        assert isinstance(response.error, InternalError)
        assert response.error.message.endswith(ending)


def test_requests_answered_through_their_senders_need_no_return(harness: Harness):
    body = """for r, rows in zip(batch.requests(), batch.batch_slices()):
                r.get_response_sender().send(
                    pb_utils.InferenceResponse([pb_utils.Tensor("Y", x[rows] * 3)]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )"""
    responses = _run_three(harness, body)
    np.testing.assert_array_equal(responses[0].outputs["Y"].to_numpy(), f32(2) * 3)
    np.testing.assert_array_equal(responses[2].outputs["Y"].to_numpy(), f32(3) * 3)


def test_async_execute_is_awaited(harness: Harness):
    model_py = """
    import asyncio

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, batch):
            await asyncio.sleep(0)
            x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
            return pb_utils.InferenceResponse([pb_utils.Tensor("Y", -x)])
    """
    _, (instance,) = harness.load("m", model_py, PROBE_CONFIG)
    (ca, sa), (cb, sb) = request("m", {"X": f32(1)}), request("m", {"X": f32(2, 5)})
    execute(instance, ca, cb)
    np.testing.assert_array_equal(only(sa).outputs["Y"].to_numpy(), -f32(1))
    np.testing.assert_array_equal(only(sb).outputs["Y"].to_numpy(), -f32(2, 5))


class _FakeGpuTensor:
    """A GPU tensor stand-in: reports a CUDA device and slices into views of its array."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    def __getitem__(self, index):
        return _FakeGpuTensor(self.array[index])

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()  # only its dtype is read

    def __dlpack_device__(self):
        return (2, 0)


def test_gpu_outputs_are_split_by_slicing_their_tensor(harness: Harness):
    model_py = """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        fake = None

        def execute(self, batch):
            x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
            self.gpu = self.fake(x * 2)
            return pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack("Y", self.gpu)])
    """
    _, (instance,) = harness.load("m", model_py, PROBE_CONFIG)
    instance._object.fake = _FakeGpuTensor
    (ca, sa), (cb, sb) = request("m", {"X": f32(1)}), request("m", {"X": f32(2, 9)})
    execute(instance, ca, cb)
    assert only(sa).outputs["Y"].shape == (1, 4)
    out = only(sb).outputs["Y"]
    assert out.memory_type is MemoryType.GPU and out.shape == (2, 4)
    part = out._array
    assert isinstance(part, _FakeGpuTensor)
    np.testing.assert_array_equal(part.array, f32(2, 9) * 2)
    assert np.shares_memory(part.array, instance._object.gpu.array)


# -- load-time checks --------------------------------------------------------------------------
IMPORT_FAILS_PY = "raise RuntimeError('model.py was imported')\n"

FP32_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 8
input [
  { name: "X", data_type: TYPE_FP32, dims: [ -1 ] },
  { name: "N", data_type: TYPE_UINT8, dims: [ 1 ] }
]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (
            FP32_CONFIG + _param("infercore.batch_assembly", "stack"),
            "parameter 'infercore.batch_assembly' must be 'concat' or 'none', not 'stack'",
        ),
        (
            FP32_CONFIG.replace("max_batch_size: 8", "max_batch_size: 0") + ASSEMBLE,
            "'infercore.batch_assembly' needs max_batch_size > 0, so that every input has a "
            "batch dimension to concatenate along",
        ),
        (
            FP32_CONFIG + _param("infercore.batch_padding", "0"),
            "'infercore.batch_padding' pads the inputs of assembled batches: it needs "
            "'infercore.batch_assembly' set to 'concat'",
        ),
        (
            FP32_CONFIG + ASSEMBLE + _param("infercore.batch_padding.X", "zero"),
            "pad value 'zero' of parameter 'infercore.batch_padding.X' is not a valid "
            "TYPE_FP32 value for input 'X'",
        ),
        (
            FP32_CONFIG + ASSEMBLE + _param("infercore.batch_padding", "-1"),
            "pad value '-1' of parameter 'infercore.batch_padding' is not a valid TYPE_UINT8 "
            "value for input 'N'",
        ),
        (
            FP32_CONFIG.replace("TYPE_FP32", "TYPE_FP16", 1)
            + ASSEMBLE
            + _param("infercore.batch_padding.X", "1e10"),
            "pad value '1e10' of parameter 'infercore.batch_padding.X' is not a valid "
            "TYPE_FP16 value for input 'X'",
        ),
        (
            FP32_CONFIG + ASSEMBLE + _param("infercore.batch_padding.W", "0"),
            "parameter 'infercore.batch_padding.W' names no input of the model",
        ),
        (
            FP32_CONFIG + ASSEMBLE + _param("infercore.batch_pading", "0"),
            "unknown parameter 'infercore.batch_pading'; batch assembly reads "
            "'infercore.batch_assembly', 'infercore.batch_padding' and "
            "'infercore.batch_padding.<input name>'",
        ),
        (
            FP32_CONFIG.replace("dims: [ -1 ] }", "dims: [ -1 ], allow_ragged_batch: true }", 1)
            + ASSEMBLE,
            "input 'X' sets allow_ragged_batch, so requests of different shapes may share a "
            "batch; batch assembly needs a pad value for it ('infercore.batch_padding' or "
            "'infercore.batch_padding.X')",
        ),
        (
            FP32_CONFIG + "model_transaction_policy { decoupled: true }\n" + ASSEMBLE,
            "'infercore.batch_assembly' cannot be used by a decoupled model: one response is "
            "split across the batch, while a decoupled model answers each request on its own",
        ),
    ],
    ids=[
        "unknown-mode",
        "no-batch-dim",
        "padding-alone",
        "bad-float",
        "negative-uint8",
        "fp16-overflow",
        "unknown-input",
        "typo",
        "ragged-without-pad",
        "decoupled",
    ],
)
def test_bad_configurations_fail_the_load_before_model_py_runs(harness: Harness, config, reason):
    with pytest.raises(InvalidArgumentError) as info:
        harness.load("m", IMPORT_FAILS_PY, config)
    assert info.value.message == f"batch assembly of model 'm': {reason}"


@pytest.mark.parametrize(
    ("data_type", "text", "expected"),
    [
        ("TYPE_BOOL", "true", True),
        ("TYPE_BOOL", "0", False),
        ("TYPE_INT8", "-128", -128),
        ("TYPE_UINT64", "18446744073709551615", 2**64 - 1),
        ("TYPE_FP16", "-inf", -np.inf),
        ("TYPE_BF16", "1.5", 1.5),
        ("TYPE_FP64", " 0.25 ", 0.25),
        ("TYPE_STRING", " <pad> ", b" <pad> "),
    ],
)
def test_pad_values_take_the_input_datatype(data_type, text, expected):
    config = text_format.Parse(
        f"""
        name: "m"
        max_batch_size: 2
        input [ {{ name: "X", data_type: {data_type}, dims: [ -1 ] }} ]
        """
        + ASSEMBLE
        + _param("infercore.batch_padding", text),
        model_config_pb2.ModelConfig(),
    )
    policy = batch_assembly_from_config(config, "m")
    assert policy is not None
    value = policy.pad_values["X"]
    assert value == expected
    if data_type != "TYPE_STRING":
        assert np.asarray(value).dtype == np.dtype(
            {"TYPE_BOOL": np.bool_, "TYPE_INT8": np.int8, "TYPE_UINT64": np.uint64,
             "TYPE_FP16": np.float16, "TYPE_BF16": "bfloat16", "TYPE_FP64": np.float64}[
                data_type
            ]
        )


def test_configs_without_batch_parameters_have_no_policy():
    config = text_format.Parse(
        FP32_CONFIG + _param("other.setting", "1"), model_config_pb2.ModelConfig()
    )
    assert batch_assembly_from_config(config, "m") is None


# -- the bundled example ------------------------------------------------------------------------
def test_example_batch_matmul_splits_an_assembled_batch(harness: Harness):
    model_dir = EXAMPLES / "batch_matmul"
    config = (model_dir / "config.pbtxt").read_text()
    _, (instance,) = harness.load("batch_matmul", (model_dir / "1" / "model.py").read_text(),
                                  config)
    xs = [np.full((n, 256), n, dtype=np.float32) for n in (3, 1, 2)]
    pairs = [request("batch_matmul", {"X": x}) for x in xs]
    execute(instance, *(core for core, _ in pairs))
    weights = instance._object.weights
    for x, (_, stream) in zip(xs, pairs, strict=True):
        y = only(stream).outputs["Y"].to_numpy()
        np.testing.assert_allclose(y, x @ weights, rtol=1e-5, atol=1e-5)



# -- with the engine's dynamic batcher ----------------------------------------------------------
def _infer_concurrently(model, inputs: list[dict[str, np.ndarray]]) -> list:
    """Send every request at once from its own thread; the responses in request order."""
    results: list = [None] * len(inputs)
    start = threading.Barrier(len(inputs))

    def send(index: int) -> None:
        start.wait(10)
        results[index] = model.infer(inputs=inputs[index]).result(timeout=30)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_the_dynamic_batcher_feeds_one_assembled_execution(tmp_path: Path):
    # The batch leaves once it holds max_batch_size rows; the long delay is only a bound.
    repo = RepositoryBuilder(tmp_path)
    repo.add_model(
        "mm",
        config=(EXAMPLES / "batch_matmul" / "config.pbtxt")
        .read_text()
        .replace('name: "batch_matmul"', 'name: "mm"')
        .replace("max_batch_size: 64", "max_batch_size: 12")
        .replace("max_queue_delay_microseconds: 500", "max_queue_delay_microseconds: 20000000"),
        model_py=(EXAMPLES / "batch_matmul" / "1" / "model.py").read_text(),
    )
    xs = [np.full((n, 256), i, dtype=np.float32) for i, n in enumerate((1, 3, 2, 1, 4, 1))]
    with Server(model_repository=tmp_path) as server:
        model = server.model("mm")
        responses = _infer_concurrently(model, [{"X": x} for x in xs])
        (stats,) = model.statistics()
    weights = (
        np.random.default_rng(0).standard_normal((256, 256)) / np.sqrt(256)
    ).astype(np.float32)
    for x, response in zip(xs, responses, strict=True):
        y = response.outputs["Y"].to_numpy()
        assert y.shape == x.shape
        np.testing.assert_allclose(y, x @ weights, rtol=1e-5, atol=1e-4)
    assert stats.execution_count == 1 and stats.inference_count == 12


def test_the_dynamic_batcher_mixes_ragged_inputs_that_assembly_pads(tmp_path: Path):
    repo = RepositoryBuilder(tmp_path)
    repo.add_model(
        "lengths",
        config="""
        name: "lengths"
        backend: "python"
        max_batch_size: 3
        input [ { name: "TOKENS", data_type: TYPE_INT32, dims: [ -1 ], allow_ragged_batch: true } ]
        output [ { name: "TOTAL", data_type: TYPE_INT64, dims: [ 2 ] } ]
        dynamic_batching { max_queue_delay_microseconds: 20000000 }
        """
        + ASSEMBLE
        + _param("infercore.batch_padding", "0"),
        model_py="""
        import numpy as np
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def execute(self, batch):
                tokens = pb_utils.get_input_tensor_by_name(batch, "TOKENS").as_numpy()
                lengths = batch.item_shapes("TOKENS")[:, 0]
                total = np.stack([tokens.sum(axis=1, dtype=np.int64), lengths], axis=1)
                return pb_utils.InferenceResponse([pb_utils.Tensor("TOTAL", total)])
        """,
    )
    rows = [[1, 2, 3], [10], [5, 5, 5, 5, 5]]
    with Server(model_repository=tmp_path) as server:
        model = server.model("lengths")
        responses = _infer_concurrently(
            model, [{"TOKENS": np.array([row], dtype=np.int32)} for row in rows]
        )
        (stats,) = model.statistics()
    totals = [response.outputs["TOTAL"].to_numpy().tolist() for response in responses]
    assert totals == [[[6, 3]], [[10, 1]], [[25, 5]]]
    assert stats.execution_count == 1


def test_the_bundled_example_serves_as_it_is(tmp_path: Path):
    shutil.copytree(EXAMPLES / "batch_matmul", tmp_path / "batch_matmul")
    xs = [np.random.default_rng(n).standard_normal((n, 256)).astype(np.float32) for n in (1, 3)]
    with Server(model_repository=tmp_path) as server:
        responses = _infer_concurrently(server.model("batch_matmul"), [{"X": x} for x in xs])
    weights = (
        np.random.default_rng(0).standard_normal((256, 256)) / np.sqrt(256)
    ).astype(np.float32)
    for x, response in zip(xs, responses, strict=True):
        np.testing.assert_allclose(response.outputs["Y"].to_numpy(), x @ weights, atol=1e-4)
