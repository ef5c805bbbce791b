"""Triton's generate extension over HTTP: ``.../generate`` and ``.../generate_stream``.

The models are this module's own: ``text`` (BYTES ``text_input`` to ``text_output``, and
what the request carried: its parameters and id; versions 1 and 2), ``typed`` (one
optional input per datatype, each sent back, with the shapes the schema gave them),
``shaped`` (fixed, variable and two-dimensional inputs), ``batched`` (max_batch_size 4),
``required`` (two required inputs), ``clash`` (an input named ``parameters``),
``speaker`` (response parameters, outputs named like the reserved keys, floats, FP16,
bytes that are not UTF-8), ``words`` (decoupled: one response per word, an error response
for the word FAIL, the final flag on its own), ``failing`` (an error response, or an
exception), and ``broken`` (fails to load).
"""

from __future__ import annotations

from ..case import Case, Http, Suite
from ..models import python_model

# -- models ----------------------------------------------------------------------------------
# Sends back every input it was given as out_<name> (flattened), and "shapes": the shape
# each input arrived with, as JSON. Used for the typed, shaped and batched models.
MIRROR_PY = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.inputs = [spec["name"] for spec in config["input"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs, shapes = [], {}
            for name in self.inputs:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is None:
                    continue
                array = tensor.as_numpy()
                shapes[name] = list(array.shape)
                outputs.append(pb_utils.Tensor("out_" + name, array.reshape(-1)))
            seen = json.dumps(shapes, sort_keys=True).encode()
            outputs.append(pb_utils.Tensor("shapes", np.array([seen], dtype=np.object_)))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
'''


def _mirror(name: str, inputs: list[tuple[str, str, str]], max_batch_size: int = 0,
            optional: bool = True):
    opt = " optional: true" if optional else ""
    ins = ",\n".join(f'  {{ name: "{n}" data_type: {t} dims: {d}{opt} }}' for n, t, d in inputs)
    outs = ",\n".join(f'  {{ name: "out_{n}" data_type: {t} dims: [ -1 ] }}'
                      for n, t, _ in inputs)
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [
{ins}
]
output [
{outs},
  {{ name: "shapes" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, MIRROR_PY)


TYPED = _mirror("typed", [
    ("bool", "TYPE_BOOL", "[ -1 ]"), ("int8", "TYPE_INT8", "[ -1 ]"),
    ("int16", "TYPE_INT16", "[ -1 ]"), ("int32", "TYPE_INT32", "[ -1 ]"),
    ("int64", "TYPE_INT64", "[ -1 ]"), ("uint8", "TYPE_UINT8", "[ -1 ]"),
    ("uint16", "TYPE_UINT16", "[ -1 ]"), ("uint32", "TYPE_UINT32", "[ -1 ]"),
    ("uint64", "TYPE_UINT64", "[ -1 ]"), ("fp16", "TYPE_FP16", "[ -1 ]"),
    ("fp32", "TYPE_FP32", "[ -1 ]"), ("fp64", "TYPE_FP64", "[ -1 ]"),
    ("bytes", "TYPE_STRING", "[ -1 ]"), ("bf16", "TYPE_BF16", "[ -1 ]")])

SHAPED = _mirror("shaped", [
    ("one", "TYPE_INT32", "[ 1 ]"), ("fixed3", "TYPE_INT32", "[ 3 ]"),
    ("two_by", "TYPE_INT32", "[ 2, -1 ]"), ("any2", "TYPE_INT32", "[ -1, -1 ]"),
    ("mixed", "TYPE_INT32", "[ -1, 2, -1 ]")])

BATCHED = _mirror("batched", [("text_input", "TYPE_STRING", "[ 1 ]"),
                              ("values", "TYPE_FP32", "[ -1 ]")], max_batch_size=4)

# Required inputs (not optional): leaving one out is the engine's error.
REQUIRED = _mirror("required", [("a", "TYPE_INT32", "[ 1 ]"), ("b", "TYPE_INT32", "[ 1 ]")],
                   optional=False)

TEXT_CONFIG = '''
name: "text"
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "parameters_seen" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "id_seen" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''

# text_output is text_input upper-cased; parameters_seen the request's parameters (JSON,
# keys sorted); id_seen the request id.
TEXT_PY = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def _text(name, value):
    return pb_utils.Tensor(name, np.array([value.encode()], dtype=np.object_))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            parameters = json.dumps(json.loads(request.parameters()), sort_keys=True)
            responses.append(pb_utils.InferenceResponse([
                _text("text_output", text.reshape(-1)[0].decode().upper()),
                _text("parameters_seen", parameters),
                _text("id_seen", request.request_id())]))
        return responses
'''

TEXT = python_model("text", TEXT_CONFIG, TEXT_PY, versions=(1, 2))

WORDS_CONFIG = '''
name: "words"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''

# One response per word of text_input, then the final flag on its own. The word FAIL
# sends an error response instead (and goes on); LAST sends its word with the final flag
# and stops. No words: only the final flag.
WORDS_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            sender = request.get_response_sender()
            for index, word in enumerate(text.reshape(-1)[0].decode().split()):
                if word == "FAIL":
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        "the model failed at word " + str(index))))
                    continue
                out = pb_utils.Tensor("text_output", np.array([word.encode()], np.object_))
                if word == "LAST":
                    sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)
                    break
                sender.send(pb_utils.InferenceResponse([out]))
            else:
                sender.send(flags=FINAL)
        return None
'''

WORDS = python_model("words", WORDS_CONFIG, WORDS_PY)

FAILING_CONFIG = '''
name: "failing"
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''

# "raise": execute raises; anything else: an error response.
FAILING_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            if text.reshape(-1)[0] == b"raise":
                raise RuntimeError("execute raised")
            responses.append(pb_utils.InferenceResponse(
                error=pb_utils.TritonError("the model refused the request")))
        return responses
'''

FAILING = python_model("failing", FAILING_CONFIG, FAILING_PY)

# An input named like the nested "parameters" object.
CLASH = _mirror("clash", [("parameters", "TYPE_INT32", "[ 1 ]")])

SPEAKER_CONFIG = '''
name: "speaker"
backend: "python"
max_batch_size: 0
input [ { name: "mode" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "model_name" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "id" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "Alpha" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "zeta" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "half" data_type: TYPE_FP16 dims: [ -1 ] },
  { name: "floats" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "doubles" data_type: TYPE_FP64 dims: [ -1 ] },
  { name: "raw" data_type: TYPE_STRING dims: [ -1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''

# What it answers depends on "mode": "params" (response parameters of each type, one
# named like a reserved key), "reserved" (outputs named model_name and id, keys that sort
# before and after the reserved ones), "fp16", "floats" (FP32 and FP64 values, NaN and
# infinities included), "raw" (bytes that are not UTF-8), "empty" (no outputs at all).
SPEAKER_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


def _text(name, *values):
    return pb_utils.Tensor(name, np.array(list(values), dtype=np.object_))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "mode").as_numpy()
            mode = mode.reshape(-1)[0].decode()
            if mode == "params":
                responses.append(pb_utils.InferenceResponse(
                    [_text("text_output", b"t")],
                    parameters={"flag": True, "count": 3, "label": "x",
                                "model_name": "from a parameter"}))
            elif mode == "double_param":
                responses.append(pb_utils.InferenceResponse(
                    [_text("text_output", b"t")], parameters={"score": 0.5}))
            elif mode == "reserved":
                responses.append(pb_utils.InferenceResponse([
                    _text("model_name", b"from an output"), _text("id", b"output id"),
                    pb_utils.Tensor("zeta", np.array([1, 2], np.int32)),
                    pb_utils.Tensor("Alpha", np.array([3], np.int32)),
                    _text("text_output", b"a", b"b")]))
            elif mode == "fp16":
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("half", np.array([1.5], np.float16))]))
            elif mode == "floats":
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("floats", np.array([0.1, 1e-7, 3e38, 2.0], np.float32)),
                    pb_utils.Tensor("doubles", np.array([0.1, 1e21, 1e-7, 123.0], np.float64))]))
            elif mode == "nonfinite":
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                    "doubles", np.array([np.nan, np.inf, -np.inf], np.float64))]))
            elif mode == "raw":
                responses.append(pb_utils.InferenceResponse([_text("raw", b"\\xff\\xfe")]))
            else:
                responses.append(pb_utils.InferenceResponse([]))
        return responses
'''

SPEAKER = python_model("speaker", SPEAKER_CONFIG, SPEAKER_PY)

BROKEN_PY = '''
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("broken on purpose")

    def execute(self, requests):
        return []
'''

BROKEN = python_model("broken", TEXT_CONFIG.replace('"text"', '"broken"'), BROKEN_PY)


# -- cases -----------------------------------------------------------------------------------
_RESPONSE_PARAMETERS = (
    "Triton 2.51's Python backend has no response parameters (InferenceResponse takes "
    "output_tensors and error only). Current python_backend takes them: src/pb_stub.cc "
    "PyParametersToJSON accepts bool/int/str values (server qa/L0_backend_python/"
    "response_parameters), and server src/http_server.cc GenerateRequestClass::"
    "FinalizeResponse maps BOOL/INT/STRING response parameters to keys of the generate "
    "response, after id/model_name/model_version (a reserved name wins).")


def _gen(model: str, body=None, *, stream: bool = False, version: str | None = None,
         raw: bytes | str | None = None, headers=()) -> Http:
    where = model if version is None else f"{model}/versions/{version}"
    path = f"/v2/models/{where}/generate" + ("_stream" if stream else "")
    if raw is not None:
        return Http("POST", path, body=raw, headers=headers)
    return Http("POST", path, json=body, headers=headers)


GOOD_TEXT = _gen("text", {"text_input": "hello"})
GOOD_WORDS = _gen("words", {"text_input": "one two"}, stream=True)

_MAPPING = [
    Case("text_scalar_string", [GOOD_TEXT]),
    Case("text_string_in_list", [_gen("text", {"text_input": ["hello"]})]),
    Case("text_two_strings_for_one", [_gen("text", {"text_input": ["a", "b"]}), GOOD_TEXT],
         note="two elements for dims [1]"),
    Case("text_empty_list", [_gen("text", {"text_input": []}), GOOD_TEXT]),
    Case("text_missing_input", [_gen("text", {}), GOOD_TEXT]),
    Case("text_missing_input_with_parameter", [_gen("text", {"max_tokens": 3}), GOOD_TEXT]),
    Case("text_parameters_top_level", [_gen("text", {
        "text_input": "x", "max_tokens": 5, "stream": False, "mode": "fast"})]),
    Case("text_parameters_object", [_gen("text", {
        "text_input": "x", "parameters": {"max_tokens": 5, "stream": True, "mode": "m"}})]),
    Case("text_parameters_object_with_input", [_gen("text", {
        "parameters": {"text_input": "inside"}})],
         note="an input name inside the parameters object"),
    Case("text_parameter_float", [_gen("text", {"text_input": "x", "temperature": 0.5}),
                                  GOOD_TEXT]),
    Case("text_parameter_float_in_object", [
        _gen("text", {"text_input": "x", "parameters": {"temperature": 0.5}}), GOOD_TEXT]),
    Case("text_parameter_null", [_gen("text", {"text_input": "x", "stop": None}), GOOD_TEXT]),
    Case("text_parameter_list", [_gen("text", {"text_input": "x", "stop": ["a"]}), GOOD_TEXT]),
    Case("text_parameter_object", [_gen("text", {"text_input": "x", "stop": {"a": 1}}),
                                   GOOD_TEXT]),
    Case("text_parameter_negative", [_gen("text", {"text_input": "x", "seed": -7})]),
    Case("text_parameter_big_int", [_gen("text", {"text_input": "x",
                                                  "seed": 18446744073709551615}), GOOD_TEXT]),
    Case("text_parameters_not_object", [_gen("text", {"text_input": "x", "parameters": 3}),
                                        GOOD_TEXT]),
    Case("text_parameters_list", [_gen("text", {"text_input": "x", "parameters": [1]}),
                                  GOOD_TEXT]),
    Case("text_parameters_nested_object", [
        _gen("text", {"text_input": "x", "parameters": {"inner": {"a": 1}}}), GOOD_TEXT]),
    Case("text_parameters_twice_nested", [
        _gen("text", {"text_input": "x", "parameters": {"parameters": {"a": 1}}}), GOOD_TEXT]),
    Case("text_id", [_gen("text", {"text_input": "x", "id": "req-7"})]),
    Case("text_id_number", [_gen("text", {"text_input": "x", "id": 7}), GOOD_TEXT]),
    Case("text_id_in_parameters", [_gen("text", {"text_input": "x",
                                                 "parameters": {"id": "p-1"}})]),
    Case("text_input_number", [_gen("text", {"text_input": 5}), GOOD_TEXT]),
    Case("text_input_bool", [_gen("text", {"text_input": True}), GOOD_TEXT]),
    Case("text_input_null", [_gen("text", {"text_input": None}), GOOD_TEXT]),
    Case("text_input_object", [_gen("text", {"text_input": {"a": "b"}}), GOOD_TEXT]),
    Case("text_input_nested_list", [_gen("text", {"text_input": [["hello"]]}), GOOD_TEXT]),
    Case("text_unicode", [_gen("text", {"text_input": "h\u00e9llo \u2603"})]),
    Case("text_version", [_gen("text", {"text_input": "v"}, version="2")]),
    Case("text_unknown_version", [_gen("text", {"text_input": "v"}, version="7"), GOOD_TEXT]),
    Case("text_bad_version", [_gen("text", {"text_input": "v"}, version="x"), GOOD_TEXT]),
    Case("unknown_model", [_gen("nope", {"text_input": "v"}), GOOD_TEXT]),
    Case("unknown_model_stream", [_gen("nope", {"text_input": "v"}, stream=True), GOOD_TEXT]),
    Case("unknown_model_bad_body", [_gen("nope", raw="{"), GOOD_TEXT],
         note="the model is looked up before the body is read"),
    Case("broken_model", [_gen("broken", {"text_input": "v"}), GOOD_TEXT]),
    Case("broken_model_stream", [_gen("broken", {"text_input": "v"}, stream=True), GOOD_TEXT]),
    Case("text_id_with_missing_input", [_gen("text", {"id": "r-1"}), GOOD_TEXT],
         note="the engine's error names the request"),
    Case("text_id_empty", [_gen("text", {"text_input": "x", "id": ""})]),
    Case("text_id_empty_missing_input", [_gen("text", {"id": ""}), GOOD_TEXT]),
    Case("text_id_null", [_gen("text", {"text_input": "x", "id": None}), GOOD_TEXT]),
    Case("text_id_list", [_gen("text", {"text_input": "x", "id": ["a"]}), GOOD_TEXT]),
    Case("text_id_twice", [_gen("text", raw='{"id": "a", "text_input": "x", "id": "b"}')]),
    Case("text_id_after_input", [_gen("text", raw='{"text_input": "x", "id": "late"}')]),
    Case("text_id_duplicate_input", [
        _gen("text", raw='{"id": "d", "text_input": "a", "text_input": "b"}'), GOOD_TEXT]),
    Case("text_parameters_empty", [_gen("text", {"text_input": "x", "parameters": {}})]),
    Case("text_parameters_null", [_gen("text", {"text_input": "x", "parameters": None}),
                                  GOOD_TEXT]),
    Case("text_parameter_int64_min", [_gen("text", {"text_input": "x",
                                                    "seed": -9223372036854775808})]),
    Case("text_parameter_below_int64", [
        _gen("text", raw='{"text_input": "x", "seed": -9223372036854775809}')]),
    Case("text_parameter_int64_max", [_gen("text", {"text_input": "x",
                                                    "seed": 9223372036854775807})]),
    Case("text_parameter_huge_int", [_gen("text", raw='{"text_input": "x", "seed": 1'
                                                      + "0" * 30 + "}")]),
    Case("text_parameter_exponent", [_gen("text", raw='{"text_input": "x", "t": 1e3}')]),
    Case("text_parameter_unicode_key", [_gen("text", {"text_input": "x", "cl\u00e9": "v"})]),
    Case("text_version_1", [_gen("text", {"text_input": "v"}, version="1")]),
    Case("text_stream_version_1", [_gen("text", {"text_input": "v"}, version="1",
                                        stream=True)]),
    Case("clash_parameters_input", [_gen("clash", {"parameters": 1}),
                                    _gen("clash", {"x": 1})],
         note="an input named like the nested parameters object"),
    Case("speaker_params", [_gen("speaker", {"mode": "params"})],
         newer=_RESPONSE_PARAMETERS,
         expect=[{"status": 200, "body": {
             "count": 3, "flag": True, "label": "x", "model_name": "speaker",
             "model_version": "1", "text_output": "t"}}]),
    Case("speaker_params_stream", [_gen("speaker", {"mode": "params", "id": "p"},
                                        stream=True)],
         newer=_RESPONSE_PARAMETERS,
         expect=[{"status": 200, "body": 'data: {"count":3,"flag":true,"id":"p","label":"x",'
                  '"model_name":"speaker","model_version":"1","text_output":"t"}\n\n'}]),
    Case("speaker_double_param", [_gen("speaker", {"mode": "double_param"}, stream=True)],
         newer=_RESPONSE_PARAMETERS + " A double is refused there (\"Expect parameters "
         "values to have type bool/int/str, found type <class 'float'>\"), an error response.",
         expect=[{"status": 400,
                  "headers": {"content-type": "text/event-stream; charset=utf-8"}}]),
    Case("speaker_reserved", [_gen("speaker", {"mode": "reserved"})]),
    Case("speaker_reserved_stream", [_gen("speaker", {"mode": "reserved", "id": "i"},
                                          stream=True)]),
    Case("speaker_fp16_output", [_gen("speaker", {"mode": "fp16"}), GOOD_TEXT]),
    Case("speaker_fp16_output_stream", [_gen("speaker", {"mode": "fp16"}, stream=True),
                                        GOOD_TEXT]),
    Case("speaker_floats_stream", [_gen("speaker", {"mode": "floats"}, stream=True)]),
    Case("speaker_nonfinite_stream", [_gen("speaker", {"mode": "nonfinite"}, stream=True)]),
    Case("speaker_raw_bytes_stream", [_gen("speaker", {"mode": "raw"}, stream=True),
                                      GOOD_TEXT]),
    Case("speaker_no_outputs", [_gen("speaker", {"mode": "empty"})]),
    Case("method_get", [Http("GET", "/v2/models/text/generate"), GOOD_TEXT]),
    Case("method_put_stream", [Http("PUT", "/v2/models/text/generate_stream", json={}),
                               GOOD_TEXT]),
]

_BODIES = [
    Case("body_empty", [_gen("text", raw=""), GOOD_TEXT]),
    Case("body_invalid_json", [_gen("text", raw="{\"text_input\": "), GOOD_TEXT]),
    Case("body_trailing_garbage", [_gen("text", raw='{"text_input": "a"} x'), GOOD_TEXT]),
    Case("body_list", [_gen("text", raw='["hello"]'), GOOD_TEXT]),
    Case("body_string", [_gen("text", raw='"hello"'), GOOD_TEXT]),
    Case("body_number", [_gen("text", raw='5'), GOOD_TEXT]),
    Case("body_null", [_gen("text", raw='null'), GOOD_TEXT]),
    Case("body_empty_object_stream", [_gen("text", {}, stream=True), GOOD_TEXT]),
    Case("body_duplicate_input", [
        _gen("text", raw='{"text_input": "a", "text_input": "b"}'), GOOD_TEXT]),
    Case("body_duplicate_parameter", [
        _gen("text", raw='{"text_input": "a", "seed": 1, "seed": 2}'), GOOD_TEXT]),
    Case("body_duplicate_parameters_object", [
        _gen("text", raw='{"text_input": "a", "parameters": {"s": 1}, "parameters": {"t": 2}}'),
        GOOD_TEXT]),
    Case("body_duplicate_in_parameters_object", [
        _gen("text", raw='{"text_input": "a", "parameters": {"s": 1, "s": 2}}'), GOOD_TEXT]),
    Case("body_input_twice_top_and_object", [
        _gen("text", {"text_input": "a", "parameters": {"text_input": "b"}}), GOOD_TEXT]),
    Case("body_parameter_twice_top_and_object", [
        _gen("text", {"text_input": "a", "seed": 1, "parameters": {"seed": 2}}), GOOD_TEXT]),
    Case("body_gzip", [_gen("text", raw='{"text_input": "a"}',
                            headers=(("Content-Encoding", "gzip"),)), GOOD_TEXT]),
    Case("body_identity_encoding", [_gen("text", raw='{"text_input": "a"}',
                                         headers=(("Content-Encoding", "identity"),))]),
    Case("body_nan", [_gen("text", raw='{"text_input": "a", "t": NaN}'), GOOD_TEXT]),
    Case("body_infinities", [_gen("text", raw='{"text_input": "a", "t": Infinity, '
                                              '"u": -Inf, "v": -NaN}')]),
    Case("body_infinity_typo", [_gen("text", raw='{"text_input": "a", "t": Infinit}'),
                                GOOD_TEXT]),
    Case("body_whitespace_only", [_gen("text", raw=" \n\t "), GOOD_TEXT]),
    Case("body_missing_colon", [_gen("text", raw='{"text_input" "a"}'), GOOD_TEXT]),
    Case("body_missing_comma", [_gen("text", raw='{"text_input": "a" "b": 2}'), GOOD_TEXT]),
    Case("body_array_missing_comma", [_gen("text", raw='{"text_input": ["a" "b"]}'),
                                      GOOD_TEXT]),
    Case("body_trailing_comma_object", [_gen("text", raw='{"text_input": "a",}'), GOOD_TEXT]),
    Case("body_trailing_comma_array", [_gen("text", raw='{"text_input": ["a",]}'),
                                       GOOD_TEXT]),
    Case("body_single_quotes", [_gen("text", raw="{'text_input': 'a'}"), GOOD_TEXT]),
    Case("body_comment", [_gen("text", raw='{"text_input": "a" /* c */}'), GOOD_TEXT]),
    Case("body_bad_escape", [_gen("text", raw='{"text_input": "a\\x"}'), GOOD_TEXT]),
    Case("body_bad_hex_escape", [_gen("text", raw='{"text_input": "\\u12g4"}'), GOOD_TEXT]),
    Case("body_lone_high_surrogate", [_gen("text", raw='{"text_input": "\\ud800x"}'),
                                      GOOD_TEXT]),
    Case("body_unicode_escapes", [_gen("text", raw='{"text_input": "\\u00e9\\ud83d\\ude00"}')]),
    Case("body_unclosed_string", [_gen("text", raw='{"text_input": "abc'), GOOD_TEXT]),
    Case("body_control_character", [_gen("text", raw='{"text_input": "a\x01b"}'), GOOD_TEXT]),
    Case("body_nul_in_string", [_gen("text", raw='{"text_input": "a\x00b"}'), GOOD_TEXT]),
    Case("body_missing_fraction", [_gen("text", raw='{"text_input": "a", "t": 1.}'),
                                   GOOD_TEXT]),
    Case("body_missing_exponent", [_gen("text", raw='{"text_input": "a", "t": 1e}'),
                                   GOOD_TEXT]),
    Case("body_number_too_big", [_gen("text", raw='{"text_input": "a", "t": 1e400}'),
                                 GOOD_TEXT]),
    Case("body_leading_zero", [_gen("text", raw='{"text_input": "a", "t": 01}'), GOOD_TEXT]),
    Case("body_plus_sign", [_gen("text", raw='{"text_input": "a", "t": +1}'), GOOD_TEXT]),
    Case("body_bare_minus", [_gen("text", raw='{"text_input": "a", "t": -}'), GOOD_TEXT]),
    Case("body_literal_typo", [_gen("text", raw='{"text_input": "a", "t": nul}'), GOOD_TEXT]),
    Case("body_unquoted_key", [_gen("text", raw='{text_input: "a"}'), GOOD_TEXT]),
    Case("body_bom", [_gen("text", raw=b'\xef\xbb\xbf{"text_input": "a"}'), GOOD_TEXT]),
    Case("body_deflate", [_gen("text", raw='{"text_input": "a"}',
                               headers=(("Content-Encoding", "deflate"),)), GOOD_TEXT]),
    Case("body_unknown_encoding", [_gen("text", raw='{"text_input": "a"}',
                                        headers=(("Content-Encoding", "br"),)), GOOD_TEXT]),
    Case("body_identity_upper_case", [_gen("text", raw='{"text_input": "a"}',
                                           headers=(("Content-Encoding", "IDENTITY"),)),
                                      GOOD_TEXT]),
    Case("body_gzip_unknown_model", [_gen("nope", raw='{"text_input": "a"}',
                                          headers=(("Content-Encoding", "gzip"),)),
                                     GOOD_TEXT], note="the model is looked up first"),
    Case("body_not_utf8", [_gen("text", raw=b'{"text_input": "\xff"}'), GOOD_TEXT]),
]


def _typed(body=None, **kw) -> Http:
    return _gen("typed", body, **kw)


GOOD_TYPED = _typed({"int32": [1, 2]})

_TYPES = [
    Case("typed_every_type", [_typed({
        "bool": [True, False], "int8": [-8, 7], "int16": [-16], "int32": [-32, 32],
        "int64": [-64], "uint8": [255], "uint16": [16], "uint32": [32], "uint64": [64],
        "fp32": [1.5, -2.25], "fp64": [0.1], "bytes": ["a", "bc"]})]),
    Case("typed_fp16", [_typed({"fp16": [1.5]}), GOOD_TYPED]),
    Case("typed_scalars", [_typed({"bool": True, "int32": 3, "fp64": 2.5, "bytes": "s"})]),
    Case("typed_fp32_from_int", [_typed({"fp32": [1, 2]})]),
    Case("typed_int_from_float", [_typed({"int32": [1.5]}), GOOD_TYPED]),
    Case("typed_int_from_string", [_typed({"int32": ["1"]}), GOOD_TYPED]),
    Case("typed_int_from_bool", [_typed({"int32": [True]}), GOOD_TYPED]),
    Case("typed_int_from_null", [_typed({"int32": [None]}), GOOD_TYPED]),
    Case("typed_uint_from_negative", [_typed({"uint8": [-1]}), GOOD_TYPED]),
    Case("typed_uint_from_string", [_typed({"uint32": ["1"]}), GOOD_TYPED]),
    Case("typed_int8_overflow", [_typed({"int8": [300]})],
         note="out of range values wrap in Triton"),
    Case("typed_uint64_max", [_typed({"uint64": [18446744073709551615]})]),
    Case("typed_int64_from_uint64_max", [_typed({"int64": [18446744073709551615]}),
                                         GOOD_TYPED]),
    Case("typed_bool_from_int", [_typed({"bool": [1]}), GOOD_TYPED]),
    Case("typed_bool_from_string", [_typed({"bool": ["true"]}), GOOD_TYPED]),
    Case("typed_float_from_string", [_typed({"fp32": ["1.5"]}), GOOD_TYPED]),
    Case("typed_float_from_bool", [_typed({"fp64": [False]}), GOOD_TYPED]),
    Case("typed_float_from_null", [_typed({"fp32": None}), GOOD_TYPED]),
    Case("typed_bytes_from_number", [_typed({"bytes": [1]}), GOOD_TYPED]),
    Case("typed_bytes_from_bool", [_typed({"bytes": True}), GOOD_TYPED]),
    Case("typed_bytes_from_object", [_typed({"bytes": [{"a": 1}]}), GOOD_TYPED]),
    Case("typed_int_from_object", [_typed({"int32": {"a": 1}}), GOOD_TYPED]),
    Case("typed_int_nested_list", [_typed({"int32": [[1, 2], [3, 4]]}), GOOD_TYPED]),
    Case("typed_bytes_nested_list", [_typed({"bytes": [["a", "b"]]}), GOOD_TYPED]),
    Case("typed_bool_nested_list", [_typed({"bool": [[True]]}), GOOD_TYPED]),
    Case("typed_mixed_list", [_typed({"int32": [1, "two"]}), GOOD_TYPED]),
    Case("typed_empty_list", [_typed({"int32": []})]),
    Case("typed_fp32_precision", [_typed({"fp32": [0.1, 1e-7]}, stream=True)],
         note="an FP32 value written back as the double it widens to"),
    Case("typed_wrapping", [_typed({"uint8": [256, 511], "int16": [40000],
                                    "int8": [-129]})]),
    Case("typed_int64_bounds", [_typed({"int64": [-9223372036854775808,
                                                  9223372036854775807]})]),
    Case("typed_uint64_from_float", [_typed({"uint64": [1.0]}), GOOD_TYPED]),
    Case("typed_empty_string", [_typed({"bytes": ""})]),
    Case("typed_ragged_fewer", [_typed({"int32": [[1], []]}), GOOD_TYPED]),
    Case("typed_ragged_more", [_typed({"int32": [[1, 2], 3]}), GOOD_TYPED]),
    Case("typed_bad_type_then_extra", [_typed({"int32": [[1, "x"], 2]}), GOOD_TYPED]),
    Case("typed_extra_then_bad_type", [_typed({"int32": [[1, 2], "x"]}), GOOD_TYPED]),
    Case("typed_bool_mixed", [_typed({"bool": [True, 0]}), GOOD_TYPED]),
    Case("typed_fp64_nan", [_typed(raw='{"fp64": [NaN, Infinity]}', stream=True)]),
    Case("typed_bf16", [_typed({"bf16": [1.5]}), GOOD_TYPED]),
    Case("typed_bytes_nested_with_id", [_typed({"id": "b-1", "bytes": [["a", "b"]]}),
                                        GOOD_TYPED]),
    Case("typed_nothing", [_typed({})]),
]


def _shaped(body) -> Http:
    return _gen("shaped", body)


_SHAPES = [
    Case("shape_one_scalar", [_shaped({"one": 5})]),
    Case("shape_fixed3", [_shaped({"fixed3": [1, 2, 3]})]),
    Case("shape_fixed3_wrong_count", [_shaped({"fixed3": [1, 2]}), _shaped({"one": 1})]),
    Case("shape_fixed3_scalar", [_shaped({"fixed3": 1}), _shaped({"one": 1})]),
    Case("shape_two_by", [_shaped({"two_by": [1, 2, 3, 4, 5, 6]})]),
    Case("shape_two_by_odd", [_shaped({"two_by": [1, 2, 3]}), _shaped({"one": 1})]),
    Case("shape_two_by_empty", [_shaped({"two_by": []})]),
    Case("shape_any2", [_shaped({"any2": [1, 2, 3]})]),
    Case("shape_mixed", [_shaped({"mixed": [1, 2, 3, 4]})]),
    Case("shape_batched", [_gen("batched", {"text_input": "a", "values": [1.0, 2.0, 3.0]})]),
    Case("shape_batched_two_texts", [_gen("batched", {"text_input": ["a", "b"]}),
                                     _gen("batched", {"text_input": "a"})]),
    Case("required_both", [_gen("required", {"a": 1, "b": 2})]),
    Case("required_one_missing", [_gen("required", {"a": 1}),
                                  _gen("required", {"a": 1, "b": 2})]),
    Case("required_missing_stream", [_gen("required", {"b": 1}, stream=True),
                                     _gen("required", {"a": 1, "b": 2}, stream=True)]),
    Case("required_unknown_key", [_gen("required", {"a": 1, "b": 2, "c": 3})],
         note="a key that is no input is a parameter"),
    Case("required_unknown_key_list", [_gen("required", {"a": 1, "b": 2, "c": [3]}),
                                       _gen("required", {"a": 1, "b": 2})]),
]

_STREAMS = [
    Case("stream_words", [GOOD_WORDS]),
    Case("stream_one_word", [_gen("words", {"text_input": "solo"}, stream=True)]),
    Case("stream_no_words", [_gen("words", {"text_input": ""}, stream=True), GOOD_WORDS],
         note="the decoupled model sends only the final flag"),
    Case("stream_last_word_final", [_gen("words", {"text_input": "a LAST"}, stream=True)]),
    Case("stream_error_first", [_gen("words", {"text_input": "FAIL a"}, stream=True),
                                GOOD_WORDS]),
    Case("stream_error_mid", [_gen("words", {"text_input": "a FAIL b"}, stream=True),
                              GOOD_WORDS]),
    Case("stream_error_only", [_gen("words", {"text_input": "FAIL"}, stream=True),
                               GOOD_WORDS]),
    Case("stream_not_decoupled", [_gen("text", {"text_input": "hi", "id": "s1"}, stream=True)]),
    Case("stream_words_with_id", [_gen("words", {"text_input": "x y", "id": "w"}, stream=True)]),
    Case("stream_get", [Http("GET", "/v2/models/words/generate_stream"), GOOD_WORDS]),
    Case("stream_unknown_version", [_gen("words", {"text_input": "a"}, version="3",
                                         stream=True), GOOD_WORDS]),
    Case("stream_version", [_gen("words", {"text_input": "a b"}, version="1", stream=True)]),
    Case("stream_parameters", [_gen("words", {"text_input": "a", "parameters": {"k": 1}},
                                    stream=True)]),
    Case("stream_duplicate_input", [
        _gen("words", raw='{"text_input": "a", "text_input": "b"}', stream=True), GOOD_WORDS]),
    Case("stream_bad_parameter", [_gen("words", {"text_input": "a", "k": [1]}, stream=True),
                                  GOOD_WORDS]),
    Case("stream_typed", [_typed({"int32": [1, 2], "fp32": [0.5], "bytes": ["x"]},
                                 stream=True)]),
    Case("stream_bad_input", [_gen("words", {"text_input": 3}, stream=True), GOOD_WORDS]),
    Case("stream_invalid_json", [_gen("words", raw="{", stream=True), GOOD_WORDS]),
    Case("stream_missing_input", [_gen("words", {}, stream=True), GOOD_WORDS]),
    Case("stream_failing_model", [_gen("failing", {"text_input": "x"}, stream=True),
                                  GOOD_WORDS]),
    Case("stream_failing_raises", [_gen("failing", {"text_input": "raise"}, stream=True),
                                   GOOD_WORDS]),
    Case("generate_decoupled_two", [_gen("words", {"text_input": "one two"}), GOOD_TEXT],
         note="generate (not stream) on a decoupled model that sends two responses"),
    Case("generate_decoupled_one_final", [_gen("words", {"text_input": "LAST"})],
         note="one response, carrying the final flag"),
    Case("generate_decoupled_one_then_flag", [_gen("words", {"text_input": "solo"}),
                                              GOOD_TEXT],
         note="one response, then the final flag on its own"),
    Case("generate_decoupled_none", [_gen("words", {"text_input": ""}), GOOD_TEXT],
         note="only the final flag: no response at all"),
    Case("generate_decoupled_error", [_gen("words", {"text_input": "FAIL"}), GOOD_TEXT]),
    Case("generate_decoupled_error_then_word", [_gen("words", {"text_input": "FAIL LAST"}),
                                                GOOD_TEXT]),
    Case("generate_decoupled_word_then_error", [_gen("words", {"text_input": "a FAIL"}),
                                                GOOD_TEXT]),
    Case("generate_failing_model", [_gen("failing", {"text_input": "x"}), GOOD_TEXT]),
    Case("generate_failing_raises", [_gen("failing", {"text_input": "raise"}), GOOD_TEXT]),
]

MODELS = [TEXT, CLASH, SPEAKER, BROKEN]
# broken fails to load: Triton must keep serving, and be ready, without it
FLAGS = ["--exit-on-error=false", "--strict-readiness=false"]

SUITES = [
    Suite("generate_mapping", "generate", models=MODELS, flags=FLAGS, cases=_MAPPING),
    Suite("generate_bodies", "generate", models=[TEXT], cases=_BODIES),
    Suite("generate_types", "generate", models=[TYPED, SHAPED, BATCHED, REQUIRED],
          cases=_TYPES + _SHAPES),
    Suite("generate_stream", "generate", models=[TEXT, TYPED, WORDS, FAILING, BROKEN],
          flags=FLAGS, cases=_STREAMS),
]
