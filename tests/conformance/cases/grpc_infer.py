"""gRPC inference: ModelInfer and ModelStreamInfer of ``inference.GRPCInferenceService``.

Requests with typed ``contents`` and with ``raw_input_contents`` for every datatype,
what Triton refuses in them (counts, sizes, shapes, datatypes, names, parameters), the
model and version lookups, streams with several requests, in-band errors and a decoupled
model, and the gRPC-level limits (message size, compression, unknown methods).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..case import Case, Grpc, GrpcStream, Suite, b64, raw_tensor
from ..models import IDENTITY_PY, add_sub, broken, decoupled_repeat, identity, python_model

# -- models ----------------------------------------------------------------------------------
# One identity model with an optional [-1] input per datatype: IN_<T> -> OUT_<T>.
DATATYPES = ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32",
             "UINT64", "FP16", "FP32", "FP64", "BF16", "BYTES")


def _config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


_TYPES_CONFIG = '''
name: "types"
backend: "python"
max_batch_size: 0
input [
{inputs}
]
output [
{outputs}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''.format(
    inputs=",\n".join(f'  {{ name: "IN_{t}" data_type: {_config_type(t)} dims: [ -1 ] '
                      f'optional: true }}' for t in DATATYPES),
    outputs=",\n".join(f'  {{ name: "OUT_{t}" data_type: {_config_type(t)} dims: [ -1 ] }}'
                       for t in DATATYPES))

# Identity, as models.IDENTITY_PY, but BF16 goes through DLPack: Triton's Python backend
# cannot give BF16 as numpy.
_TYPES_PY = '''
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.pairs = [(i["name"], o["name"]) for i, o in zip(config["input"], config["output"])]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for input_name, output_name in self.pairs:
                tensor = pb_utils.get_input_tensor_by_name(request, input_name)
                if tensor is None:
                    continue
                if input_name == "IN_BF16":
                    outputs.append(pb_utils.Tensor.from_dlpack(output_name, tensor.to_dlpack()))
                else:
                    outputs.append(pb_utils.Tensor(output_name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
'''

# Answers every request with an error response.
_FAILS = python_model("fails", '''
name: "fails"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
''', '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("this model always fails"))
                for _ in requests]
''')

# One required input and two optional ones.
_SOME_OPTIONAL = python_model("some_optional", '''
name: "some_optional"
backend: "python"
max_batch_size: 0
input [
  { name: "A" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "B" data_type: TYPE_INT32 dims: [ -1 ] optional: true },
  { name: "C" data_type: TYPE_INT32 dims: [ -1 ] optional: true }
]
output [
  { name: "OA" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "OB" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "OC" data_type: TYPE_INT32 dims: [ -1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
''', IDENTITY_PY)

_BROKEN = broken("broken_infer")

_MODELS = [
    add_sub(),
    add_sub("simple_versions", versions=(1, 2, 3),
            extra="version_policy: { specific: { versions: [ 1, 3 ] } }"),
    python_model("types", _TYPES_CONFIG, _TYPES_PY),
    identity("optional_pair", datatype="TYPE_INT32", dims="[ -1 ]", inputs=2, optional=True),
    identity("batch_fp32", datatype="TYPE_FP32", dims="[ -1 ]", max_batch_size=4),
    decoupled_repeat(),
    _BROKEN,
    _FAILS,
    _SOME_OPTIONAL,
]


# -- request builders ------------------------------------------------------------------------
def _tensor(name: str, datatype: str, shape: Sequence[int],
            contents: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(shape)}
    if contents is not None:
        tensor["contents"] = dict(contents)
    tensor.update(fields)
    return tensor


def _request(model: str, inputs: Sequence[Mapping[str, Any]],
             outputs: Sequence[str | Mapping[str, Any]] = (), **fields: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"model_name": model, "inputs": list(inputs)}
    if outputs:
        request["outputs"] = [{"name": o} if isinstance(o, str) else dict(o) for o in outputs]
    request.update(fields)
    return request


def _infer(model: str, inputs: Sequence[Mapping[str, Any]], raw: Sequence[bytes] = (),
           outputs: Sequence[str | Mapping[str, Any]] = (), **fields: Any) -> Grpc:
    return Grpc("ModelInfer", _request(model, inputs, outputs, **fields), raw=raw)


_A = np.arange(16, dtype=np.int32).reshape(1, 16)
_B = np.full((1, 16), 2, dtype=np.int32)


def _simple_raw(shape: Sequence[int] = (1, 16), **fields: Any) -> Grpc:
    """A good raw request for ``simple`` (OUTPUT0 = A + B, OUTPUT1 = A - B)."""
    a = np.resize(_A, shape).astype(np.int32)
    b = np.resize(_B, shape).astype(np.int32)
    return _infer("simple", [_tensor("INPUT0", "INT32", shape), _tensor("INPUT1", "INT32", shape)],
                  raw=[raw_tensor(a), raw_tensor(b)], **fields)


def _simple_contents(first: Sequence[int] | None = None, second: Sequence[int] | None = None,
                     shape: Sequence[int] = (1, 16), **fields: Any) -> Grpc:
    first = list(range(16)) if first is None else list(first)
    second = [2] * 16 if second is None else list(second)
    return _infer("simple", [
        _tensor("INPUT0", "INT32", shape, {"int_contents": first}),
        _tensor("INPUT1", "INT32", shape, {"int_contents": second}),
    ], **fields)


_GOOD = _simple_raw()


def _types_raw(datatype: str, array: np.ndarray, shape: Sequence[int] | None = None,
               **fields: Any) -> Grpc:
    shape = list(array.shape) if shape is None else list(shape)
    return _infer("types", [_tensor(f"IN_{datatype}", datatype, shape)],
                  raw=[raw_tensor(array)], **fields)


def _types_contents(datatype: str, field: str, values: Sequence[Any],
                    shape: Sequence[int] | None = None) -> Grpc:
    shape = [len(values)] if shape is None else list(shape)
    return _infer("types", [_tensor(f"IN_{datatype}", datatype, shape, {field: list(values)})])


def _param(**value: Any) -> dict[str, Any]:
    """An InferParameter in JSON form: _param(int64_param=3)."""
    return dict(value)


# -- ModelInfer: contents and raw ------------------------------------------------------------
_CASES: list[Case] = [
    Case("contents_int", [_simple_contents()]),
    Case("raw", [_GOOD]),
    Case("raw_batch_of_three", [_simple_raw((3, 16))]),
    Case("contents_requested_output", [_simple_contents(outputs=["OUTPUT1"])]),
    Case("raw_both_outputs_requested", [_simple_raw(outputs=["OUTPUT1", "OUTPUT0"])],
         note="outputs come back in the model's order or the request's"),
    Case("mixed_contents_and_raw", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16], {"int_contents": list(range(16))}),
                          _tensor("INPUT1", "INT32", [1, 16])], raw=[raw_tensor(_B)]),
        _GOOD]),
    Case("mixed_raw_first_then_contents", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]),
                          _tensor("INPUT1", "INT32", [1, 16], {"int_contents": [2] * 16})],
               raw=[raw_tensor(_A)]),
        _GOOD]),
    Case("contents_too_few", [_simple_contents(first=range(15)), _GOOD]),
    Case("contents_too_many", [_simple_contents(second=[2] * 17), _GOOD]),
    Case("contents_empty_message", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16], {}),
                          _tensor("INPUT1", "INT32", [1, 16], {"int_contents": [2] * 16})]),
        _GOOD], note="a contents message with no field set"),
    Case("contents_wrong_field", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16], {"fp32_contents": [1.0] * 16}),
                          _tensor("INPUT1", "INT32", [1, 16], {"int_contents": [2] * 16})]),
        _GOOD]),
    Case("contents_two_fields", [
        _infer("simple", [
            _tensor("INPUT0", "INT32", [1, 16],
                    {"int_contents": list(range(16)), "int64_contents": list(range(16))}),
            _tensor("INPUT1", "INT32", [1, 16], {"int_contents": [2] * 16})]),
        _GOOD]),
    Case("raw_too_short", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A)[:60], raw_tensor(_B)]),
        _GOOD]),
    Case("raw_too_long", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B) + b"\0\0\0\0"]),
        _GOOD]),
    Case("raw_fewer_than_inputs", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A)]),
        _GOOD]),
    Case("raw_more_than_inputs", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B), raw_tensor(_B)]),
        _GOOD]),
    Case("raw_without_inputs", [
        _infer("simple", [], raw=[raw_tensor(_A)]), _GOOD]),
    Case("no_inputs", [_infer("simple", []), _GOOD]),
    Case("no_data_at_all", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]),
                          _tensor("INPUT1", "INT32", [1, 16])]),
        _GOOD]),
]

# Every datatype, raw and (where a typed field carries it) as contents.
_RAW_VALUES: dict[str, np.ndarray] = {
    "BOOL": np.array([True, False, True]),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "INT16": np.array([-32768, 1, 32767], dtype=np.int16),
    "INT32": np.array([-2**31, 2, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-2**63, 3, 2**63 - 1], dtype=np.int64),
    "UINT8": np.array([0, 1, 255], dtype=np.uint8),
    "UINT16": np.array([0, 2, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 3, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 4, 2**64 - 1], dtype=np.uint64),
    "FP16": np.array([0.5, -2.0, 65504.0], dtype=np.float16),
    "FP32": np.array([0.25, -1.5, 3.0e38], dtype=np.float32),
    "FP64": np.array([0.125, -1.0e300, 2.0], dtype=np.float64),
    "BF16": np.array([0x3F80, 0xC000, 0x0000], dtype=np.uint16),  # 1.0, -2.0, 0.0
    "BYTES": np.array([b"a", b"", b"\xff\x00z"], dtype=np.object_),
}
for _t in DATATYPES:
    _CASES.append(Case(f"raw_{_t.lower()}", [_types_raw(_t, _RAW_VALUES[_t])]))

_CONTENTS: list[tuple[str, str, list[Any]]] = [
    ("BOOL", "bool_contents", [True, False, True]),
    ("INT8", "int_contents", [-128, 0, 127]),
    ("INT16", "int_contents", [-32768, 1, 32767]),
    ("INT32", "int_contents", [-2**31, 2, 2**31 - 1]),
    ("INT64", "int64_contents", [-2**63, 3, 2**63 - 1]),
    ("UINT8", "uint_contents", [0, 1, 255]),
    ("UINT16", "uint_contents", [0, 2, 65535]),
    ("UINT32", "uint_contents", [0, 3, 2**32 - 1]),
    ("UINT64", "uint64_contents", [0, 4, 2**64 - 1]),
    ("FP32", "fp32_contents", [0.25, -1.5, 3.0e38]),
    ("FP64", "fp64_contents", [0.125, -1.0e300, 2.0]),
    ("BYTES", "bytes_contents", [b64(b"a"), b64(b""), b64(b"\xff\x00z")]),
]
for _t, _field, _values in _CONTENTS:
    _CASES.append(Case(f"contents_{_t.lower()}", [_types_contents(_t, _field, _values)]))

_CASES += [
    Case("contents_int8_out_of_range", [_types_contents("INT8", "int_contents", [300, -129, 1])],
         note="int_contents values wider than INT8"),
    Case("contents_uint8_out_of_range", [_types_contents("UINT8", "uint_contents", [256, 511, 1])]),
    Case("contents_fp16_as_fp32", [_types_contents("FP16", "fp32_contents", [1.0, 2.0, 3.0]),
                                   _types_raw("FP16", _RAW_VALUES["FP16"])],
         note="FP16 has no typed field"),
    Case("contents_bf16_as_fp32", [_types_contents("BF16", "fp32_contents", [1.0, 2.0, 3.0])]),
    Case("contents_fp16_empty", [
        _infer("types", [_tensor("IN_FP16", "FP16", [0], {})])]),
    Case("contents_int16_as_int64", [_types_contents("INT16", "int64_contents", [1, 2, 3])]),
    Case("contents_bytes_count", [_types_contents("BYTES", "bytes_contents",
                                                  [b64(b"x"), b64(b"y")], shape=[3])]),
    Case("contents_bool_count", [_types_contents("BOOL", "bool_contents", [True], shape=[2])]),
    Case("raw_bytes_truncated_length", [
        _infer("types", [_tensor("IN_BYTES", "BYTES", [2])],
               raw=[b"\x01\x00\x00\x00a\x09\x00\x00\x00bc"]),
        _GOOD]),
    Case("raw_bytes_too_few_elements", [
        _infer("types", [_tensor("IN_BYTES", "BYTES", [3])], raw=[raw_tensor(
            np.array([b"a", b"b"], dtype=np.object_))])]),
    Case("raw_bytes_extra_data", [
        _infer("types", [_tensor("IN_BYTES", "BYTES", [1])], raw=[raw_tensor(
            np.array([b"a", b"b"], dtype=np.object_))])]),
    Case("raw_bool_not_zero_or_one", [
        _infer("types", [_tensor("IN_BOOL", "BOOL", [2])], raw=[b"\x02\x01"])]),
    Case("raw_two_types_one_request", [
        _infer("types", [_tensor("IN_FP64", "FP64", [2]), _tensor("IN_UINT8", "UINT8", [3])],
               raw=[raw_tensor(np.array([1.0, 2.0])), raw_tensor(np.array([7, 8, 9], np.uint8))])]),
]

# -- ModelInfer: datatypes and shapes against the model --------------------------------------
_CASES += [
    Case("wrong_datatype", [
        _infer("simple", [_tensor("INPUT0", "FP32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A.astype(np.float32)), raw_tensor(_B)]),
        _GOOD]),
    Case("unknown_datatype", [
        _infer("simple", [_tensor("INPUT0", "INT33", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)]),
        _GOOD]),
    Case("empty_datatype", [
        _infer("simple", [_tensor("INPUT0", "", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("lowercase_datatype", [
        _infer("simple", [_tensor("INPUT0", "int32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("shape_without_batch_dim", [
        _infer("simple", [_tensor("INPUT0", "INT32", [16]), _tensor("INPUT1", "INT32", [16])],
               raw=[raw_tensor(_A), raw_tensor(_B)]),
        _GOOD]),
    Case("shape_wrong_dim", [
        _infer("simple", [_tensor("INPUT0", "INT32", [2, 8]), _tensor("INPUT1", "INT32", [2, 8])],
               raw=[raw_tensor(_A), raw_tensor(_B)]),
        _GOOD]),
    Case("shape_extra_dim", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16, 1]),
                          _tensor("INPUT1", "INT32", [1, 16, 1])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("shape_scalar", [
        _infer("simple", [_tensor("INPUT0", "INT32", []), _tensor("INPUT1", "INT32", [])],
               raw=[b"\0\0\0\0", b"\0\0\0\0"])]),
    Case("batch_too_large", [_simple_raw((9, 16)), _simple_raw((8, 16))]),
    Case("batch_zero", [_simple_raw((0, 16)), _GOOD]),
    Case("batch_mismatch", [
        _infer("simple", [_tensor("INPUT0", "INT32", [2, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(np.resize(_A, (2, 16))), raw_tensor(_B)]),
        _GOOD]),
    Case("zero_size_dim", [_types_raw("FP32", np.zeros(0, np.float32))]),
    Case("zero_size_bytes", [_types_raw("BYTES", np.array([], dtype=np.object_))]),
    Case("zero_size_contents", [_infer("types", [_tensor("IN_INT32", "INT32", [0],
                                                         {"int_contents": []})])]),
    Case("zero_size_in_batch", [
        _infer("batch_fp32", [_tensor("INPUT0", "FP32", [2, 0])], raw=[b""])]),
    Case("negative_dim", [
        _infer("types", [_tensor("IN_FP32", "FP32", [-1])],
               raw=[raw_tensor(np.ones(1, np.float32))]),
        _GOOD]),
    Case("negative_batch_dim", [
        _infer("simple", [_tensor("INPUT0", "INT32", [-1, 16]),
                          _tensor("INPUT1", "INT32", [-1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)]),
        _GOOD]),
    Case("element_count_overflow", [
        _infer("types", [_tensor("IN_FP32", "FP32", [2**32, 2**32])], raw=[b""]),
        _GOOD], note="the element count wraps to 0 in 64 bits"),
    Case("element_count_huge", [
        _infer("types", [_tensor("IN_FP32", "FP32", [2**62, 2])], raw=[b"\0\0\0\0"]),
        _GOOD]),
    Case("element_count_huge_contents", [
        _infer("types", [_tensor("IN_INT32", "INT32", [2**40], {"int_contents": [1]})]),
        _GOOD]),
]

# -- ModelInfer: names -----------------------------------------------------------------------
_CASES += [
    Case("duplicate_input", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT0", "INT32", [1, 16]),
                          _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_A), raw_tensor(_B)]),
        _GOOD]),
    Case("duplicate_output", [_simple_raw(outputs=["OUTPUT0", "OUTPUT0"]), _GOOD],
         newer="triton-inference-server/core pull request #493 (merged 2026-04, 'fix: "
               "Validate and reject duplicate output names in inference requests', tested "
               "over HTTP and gRPC by server pull request #8741): a request naming an "
               "output twice is refused; 2.51 answers the output once",
         expect=[{"code": "INVALID_ARGUMENT"}, {"code": "OK"}]),
    Case("unknown_output", [_simple_raw(outputs=["OUTPUT9"]), _GOOD]),
    Case("unknown_input", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16]),
                          _tensor("INPUT9", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B), raw_tensor(_B)]),
        _GOOD]),
    Case("missing_input", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16])], raw=[raw_tensor(_A)]),
        _GOOD]),
    Case("optional_one_of_two", [
        _infer("optional_pair", [_tensor("INPUT1", "INT32", [2])],
               raw=[raw_tensor(np.array([5, 6], np.int32))])]),
    Case("optional_none", [_infer("optional_pair", [])]),
    Case("optional_output_of_missing_input", [
        _infer("optional_pair", [_tensor("INPUT1", "INT32", [2])],
               raw=[raw_tensor(np.array([5, 6], np.int32))], outputs=["OUTPUT0"])],
         note="the model makes no OUTPUT0 when INPUT0 is absent"),
]

# -- ModelInfer: models and versions ---------------------------------------------------------
_CASES += [
    Case("unknown_model", [
        _infer("nope", [_tensor("INPUT0", "INT32", [1, 16])], raw=[raw_tensor(_A)]), _GOOD]),
    Case("unknown_model_bad_body", [
        _infer("nope", [_tensor("INPUT0", "INT33", [-1])])],
         note="the model is looked up before the inputs are read"),
    Case("empty_model_name", [_infer("", [])]),
    Case("model_name_with_path_characters", [_infer("../simple", []), _infer("a/b", [])],
         note="a name no repository could hold is looked up like any other"),
    Case("unknown_version", [_simple_raw(model_version="9"), _GOOD]),
    Case("version_explicit", [_simple_raw(model_version="1")]),
    Case("version_text", [_simple_raw(model_version="one")]),
    Case("version_negative", [_simple_raw(model_version="-1")]),
    Case("version_not_loaded", [
        _infer("simple_versions", [_tensor("INPUT0", "INT32", [1, 16]),
                                   _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)], model_version="2"),
        _infer("simple_versions", [_tensor("INPUT0", "INT32", [1, 16]),
                                   _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("failed_model", [
        _infer("broken_infer", [_tensor("IN", "FP32", [1])],
               raw=[raw_tensor(np.ones(1, np.float32))]),
        _GOOD]),
    Case("decoupled_model_unary", [
        _infer("repeat_int32", [_tensor("IN", "INT32", [2])],
               raw=[raw_tensor(np.array([1, 2], np.int32))]),
        _GOOD]),
    Case("request_id", [_simple_raw(id="my-request-7")]),
    Case("request_id_on_error", [_simple_raw((9, 16), id="bad-one")],
         note="an error status carries no message, so no id"),
]

# -- ModelInfer: parameters ------------------------------------------------------------------
_CASES += [
    Case("param_priority", [_simple_raw(parameters={"priority": _param(int64_param=1)})]),
    Case("param_priority_uint64", [_simple_raw(parameters={"priority": _param(uint64_param=2)})]),
    Case("param_priority_negative", [
        _simple_raw(parameters={"priority": _param(int64_param=-1)}), _GOOD]),
    Case("param_priority_string", [
        _simple_raw(parameters={"priority": _param(string_param="high")}), _GOOD]),
    Case("param_timeout", [_simple_raw(parameters={"timeout": _param(int64_param=60_000_000)})]),
    Case("param_timeout_bool", [_simple_raw(parameters={"timeout": _param(bool_param=True)}),
                                _GOOD]),
    Case("param_sequence_id_non_sequence_model", [
        _simple_raw(parameters={"sequence_id": _param(int64_param=5),
                                "sequence_start": _param(bool_param=True)})]),
    Case("param_sequence_id_string", [
        _simple_raw(parameters={"sequence_id": _param(string_param="seq-a")})]),
    Case("param_sequence_id_bool", [
        _simple_raw(parameters={"sequence_id": _param(bool_param=True)}), _GOOD]),
    Case("param_sequence_start_int", [
        _simple_raw(parameters={"sequence_start": _param(int64_param=1)}), _GOOD]),
    Case("param_sequence_end_string", [
        _simple_raw(parameters={"sequence_end": _param(string_param="true")}), _GOOD]),
    Case("param_binary_data_output", [
        _simple_raw(parameters={"binary_data_output": _param(bool_param=True)})],
         note="an HTTP parameter; over gRPC an ordinary one"),
    Case("param_custom_typed", [
        _simple_raw(parameters={"flag": _param(bool_param=False), "count": _param(int64_param=-3),
                                "label": _param(string_param="x")})]),
    Case("param_custom_double", [
        _simple_raw(parameters={"ratio": _param(double_param=0.5)}), _GOOD]),
    Case("param_custom_uint64", [
        _simple_raw(parameters={"big": _param(uint64_param=7)}), _GOOD]),
    Case("param_custom_unset", [_simple_raw(parameters={"empty": {}}), _GOOD],
         note="an InferParameter with no value set"),
    Case("param_triton_reserved", [
        _simple_raw(parameters={"triton_nope": _param(bool_param=True)}), _GOOD]),
    Case("param_empty_final_response_unary", [
        _simple_raw(parameters={"triton_enable_empty_final_response": _param(bool_param=True)})]),
    Case("param_empty_final_response_int", [
        _simple_raw(parameters={"triton_enable_empty_final_response": _param(int64_param=1)}),
        _GOOD]),
    Case("param_classification", [
        _simple_raw(outputs=[{"name": "OUTPUT0",
                              "parameters": {"classification": _param(int64_param=3)}}])]),
    Case("param_classification_types_fp32", [
        _infer("types", [_tensor("IN_FP32", "FP32", [4])],
               raw=[raw_tensor(np.array([0.5, 3.0, -1.0, 2.0], np.float32))],
               outputs=[{"name": "OUT_FP32",
                         "parameters": {"classification": _param(int64_param=2)}}])]),
    Case("param_classification_string", [
        _simple_raw(outputs=[{"name": "OUTPUT0",
                              "parameters": {"classification": _param(string_param="2")}}]),
        _GOOD]),
    Case("param_classification_zero", [
        _simple_raw(outputs=[{"name": "OUTPUT0",
                              "parameters": {"classification": _param(int64_param=0)}}]),
        _GOOD]),
    Case("param_output_unknown", [
        _simple_raw(outputs=[{"name": "OUTPUT0", "parameters": {"foo": _param(int64_param=1)}}])],
         note="an output parameter Triton does not read"),
    Case("param_input_unknown", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16],
                                  parameters={"foo": _param(string_param="bar")}),
                          _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
]

# -- ModelInfer: which error Triton names first -----------------------------------------------
# Triton's core checks the requested outputs, the input count, the batch dimension, each
# input's datatype and shape, then each input's data size, walking the inputs in the order
# of its std::unordered_map (for INPUT0, INPUT1: INPUT1 first).
_CASES += [
    Case("order_unknown_output_before_missing_input", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16])], raw=[raw_tensor(_A)],
               outputs=["NOPE"])]),
    Case("order_unknown_outputs_least_name", [_simple_raw(outputs=["ZZZ", "AAA", "MMM"])]),
    Case("order_datatype_before_shape", [
        _infer("simple", [_tensor("INPUT0", "FP32", [1, 15]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("order_shape_of_input1_first", [
        _infer("simple", [_tensor("INPUT0", "FP32", [1, 16]), _tensor("INPUT1", "INT32", [1, 15])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("order_datatype_of_input1_first", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 15]), _tensor("INPUT1", "FP32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("order_shape_before_size", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT1", "INT32", [1, 15])],
               raw=[raw_tensor(_A)[:8], raw_tensor(_B)])]),
    Case("order_size_of_input1_first", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A)[:8], raw_tensor(_B)[:4]])]),
    Case("order_count_before_datatype", [
        _infer("simple", [_tensor("INPUT0", "FP32", [1, 16])], raw=[raw_tensor(_A)])]),
    Case("order_duplicate_before_shape", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 15]), _tensor("INPUT0", "INT32", [1, 16]),
                          _tensor("INPUT1", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_A), raw_tensor(_B)])]),
    Case("order_unknown_name_before_datatype", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("ZZ", "INT33", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)])]),
    Case("count_over_fifteen_inputs", [
        _infer("types", [_tensor(f"IN_{t}", "INT32", [1]) for t in DATATYPES]
               + [_tensor("EXTRA", "INT32", [1])], raw=[b"\0" * 4] * 15)],
         note="15 inputs: past 13 the map rehashes, and the order of 'Got input(s)' with it"),
    Case("unknown_input_within_count", [
        _infer("types", [_tensor("IN_INT32", "INT32", [1]), _tensor("IN_FP32", "FP32", [1]),
                         _tensor("ZZZ", "INT32", [1]), _tensor("IN_INT8", "INT8", [1]),
                         _tensor("IN_BOOL", "BOOL", [1])],
               raw=[b"\0" * 4, b"\0" * 4, b"\0" * 4, b"\0", b"\0"])]),
    Case("unknown_inputs_within_count", [
        _infer("types", [_tensor("ZA", "INT32", [1]), _tensor("IN_INT32", "INT32", [1]),
                         _tensor("ZB", "INT32", [1]), _tensor("ZC", "INT32", [1])],
               raw=[b"\0" * 4] * 4)]),
    Case("unknown_input_instead_of_required", [
        _infer("simple", [_tensor("INPUT0", "INT32", [1, 16]), _tensor("INPUT9", "INT32", [1, 16])],
               raw=[raw_tensor(_A), raw_tensor(_B)]),
        _GOOD]),
    Case("optional_unknown_within_count", [
        _infer("optional_pair", [_tensor("INPUT0", "INT32", [1]), _tensor("BAD", "INT32", [1])],
               raw=[b"\0" * 4, b"\0" * 4])]),
    Case("optional_too_many", [
        _infer("optional_pair", [_tensor("INPUT0", "INT32", [1]), _tensor("INPUT1", "INT32", [1]),
                                 _tensor("BAD", "INT32", [1])], raw=[b"\0" * 4] * 3)]),
    Case("required_missing_within_count", [
        _infer("some_optional", [_tensor("B", "INT32", [1]), _tensor("C", "INT32", [1])],
               raw=[b"\0" * 4] * 2)],
         note="two inputs where one to three are allowed, but the required one is missing"),
    Case("required_missing_too_few", [_infer("some_optional", [])]),
    Case("required_only", [
        _infer("some_optional", [_tensor("A", "INT32", [1])], raw=[b"\1\0\0\0"])]),
    Case("empty_input_name", [
        _infer("types", [_tensor("", "INT32", [1])], raw=[b"\0" * 4])]),
    Case("invalid_datatype_with_contents", [
        _infer("simple", [_tensor("INPUT0", "INT33", [1, 16], {"int_contents": list(range(16))}),
                          _tensor("INPUT1", "INT32", [1, 16], {"int_contents": [2] * 16})])]),
    Case("contents_bytes_for_int32", [
        _infer("types", [_tensor("IN_INT32", "INT32", [1], {"bytes_contents": [b64(b"abcd")]})])]),
    Case("contents_bool_count_over", [_types_contents("BOOL", "bool_contents",
                                                      [True, False, True], shape=[2])]),
    Case("contents_fp64_count", [_types_contents("FP64", "fp64_contents", [1.0], shape=[3])]),
    Case("contents_bytes_too_many", [_types_contents("BYTES", "bytes_contents", [b64(b"x")] * 4,
                                                     shape=[3])]),
    Case("raw_bytes_short_length", [
        _infer("types", [_tensor("IN_BYTES", "BYTES", [1])], raw=[b"\x01\x00"])]),
    Case("classification_of_unknown_output", [
        _simple_raw(outputs=[{"name": "NOPE",
                              "parameters": {"classification": _param(int64_param=1)}}])]),
    # The batch size is Triton's uint32: a batch dim of -1 or 2^33 is not refused as such,
    # and a batch of 0 leaves the batch dim out of the expected size.
    Case("batch_negative_single_input", [
        _infer("batch_fp32", [_tensor("INPUT0", "FP32", [-1, 2])], raw=[b"\0" * 8])]),
    Case("batch_zero_single_input", [
        _infer("batch_fp32", [_tensor("INPUT0", "FP32", [0, 2])], raw=[b""])]),
    Case("batch_two_and_zero", [
        _infer("simple", [_tensor("INPUT0", "INT32", [2, 16]), _tensor("INPUT1", "INT32", [0, 16])],
               raw=[raw_tensor(np.resize(_A, (2, 16))), b""])]),
    Case("batch_past_uint32", [
        _infer("batch_fp32", [_tensor("INPUT0", "FP32", [2**33, 1])], raw=[b"\0" * 8])]),
    Case("negative_item_dim", [
        _infer("batch_fp32", [_tensor("INPUT0", "FP32", [1, -2])], raw=[b"\0" * 8]), _GOOD]),
    Case("failing_model", [
        _infer("fails", [_tensor("IN", "INT32", [1])], raw=[b"\0" * 4]), _GOOD]),
]

# -- ModelStreamInfer ------------------------------------------------------------------------
_GOOD_REQUEST = _GOOD.request
_GOOD_RAW = list(_GOOD.raw)
_REPEAT3 = _request("repeat_int32", [_tensor("IN", "INT32", [3])], id="r3")
_REPEAT3_RAW = [raw_tensor(np.array([4, 5, 6], np.int32))]
_EMPTY_FINAL = {"triton_enable_empty_final_response": _param(bool_param=True)}


def _stream(*pairs: tuple[Mapping[str, Any], Sequence[bytes]],
            metadata: Sequence[tuple[str, str]] = ()) -> GrpcStream:
    return GrpcStream(requests=[request for request, _ in pairs],
                      raw=[list(raw) for _, raw in pairs], metadata=metadata)


_CASES += [
    Case("stream_one", [_stream((_GOOD_REQUEST, _GOOD_RAW))]),
    Case("stream_three_in_order", [_stream(
        ({**_GOOD_REQUEST, "id": "a"}, _GOOD_RAW),
        ({**_GOOD_REQUEST, "id": "b"}, _GOOD_RAW),
        (_request("simple", [_tensor("INPUT0", "INT32", [1, 16], {"int_contents": [1] * 16}),
                             _tensor("INPUT1", "INT32", [1, 16], {"int_contents": [1] * 16})],
                  id="c"), []))]),
    Case("stream_no_requests", [GrpcStream(requests=[])]),
    Case("stream_unknown_model", [_stream(
        (_request("nope", [], id="u1"), []), (_GOOD_REQUEST, _GOOD_RAW))]),
    Case("stream_error_between_good", [_stream(
        ({**_GOOD_REQUEST, "id": "first"}, _GOOD_RAW),
        (_request("simple", [_tensor("INPUT0", "INT32", [9, 16]),
                             _tensor("INPUT1", "INT32", [9, 16])], id="bad"),
         [raw_tensor(np.resize(_A, (9, 16))), raw_tensor(np.resize(_B, (9, 16)))]),
        ({**_GOOD_REQUEST, "id": "last"}, _GOOD_RAW))]),
    Case("stream_decode_error", [_stream(
        (_request("simple", [_tensor("INPUT0", "INT32", [1, 16]),
                             _tensor("INPUT1", "INT32", [1, 16])], id="short"),
         [raw_tensor(_A)[:8], raw_tensor(_B)]),
        (_GOOD_REQUEST, _GOOD_RAW))]),
    Case("stream_bad_parameter", [_stream(
        ({**_GOOD_REQUEST, "id": "p", "parameters": {"priority": _param(string_param="x")}},
         _GOOD_RAW))]),
    Case("stream_unknown_version", [_stream(({**_GOOD_REQUEST, "model_version": "9"}, _GOOD_RAW))]),
    Case("stream_failed_model", [_stream(
        (_request("broken_infer", [_tensor("IN", "FP32", [1])], id="b"),
         [raw_tensor(np.ones(1, np.float32))]))]),
    Case("stream_empty_final_not_decoupled", [_stream(
        ({**_GOOD_REQUEST, "parameters": _EMPTY_FINAL}, _GOOD_RAW))]),
    Case("stream_decoupled", [_stream((_REPEAT3, _REPEAT3_RAW))]),
    Case("stream_decoupled_empty_final", [_stream(
        ({**_REPEAT3, "parameters": _EMPTY_FINAL}, _REPEAT3_RAW))]),
    Case("stream_decoupled_empty_final_false", [_stream(
        ({**_REPEAT3, "parameters": {"triton_enable_empty_final_response":
                                     _param(bool_param=False)}}, _REPEAT3_RAW))]),
    Case("stream_decoupled_no_responses", [_stream(
        (_request("repeat_int32", [_tensor("IN", "INT32", [0])], id="none",
                  parameters=_EMPTY_FINAL), [b""]))]),
    Case("stream_decoupled_no_responses_no_final", [_stream(
        (_request("repeat_int32", [_tensor("IN", "INT32", [0])], id="none"), [b""]))]),
    Case("stream_decoupled_bad_input", [_stream(
        (_request("repeat_int32", [_tensor("IN", "FP32", [1])], id="f"),
         [raw_tensor(np.ones(1, np.float32))]),
        (_REPEAT3, _REPEAT3_RAW))]),
    Case("stream_empty_final_wrong_type", [_stream(
        ({**_REPEAT3, "parameters": {"triton_enable_empty_final_response":
                                     _param(string_param="true")}}, _REPEAT3_RAW))]),
    Case("stream_grpc_error_header", [_stream(
        (_request("nope", [], id="u"), []), (_GOOD_REQUEST, _GOOD_RAW),
        metadata=[("triton_grpc_error", "true")])],
         note="the header asks for errors as the stream's status"),
    Case("stream_grpc_error_header_good", [_stream(
        (_GOOD_REQUEST, _GOOD_RAW), metadata=[("triton_grpc_error", "true")])]),
    Case("stream_failing_model", [_stream(
        (_request("fails", [_tensor("IN", "INT32", [1])], id="f1"), [b"\0" * 4]),
        (_GOOD_REQUEST, _GOOD_RAW))]),
    Case("stream_failing_model_grpc_error_header", [_stream(
        (_request("fails", [_tensor("IN", "INT32", [1])], id="f1"), [b"\0" * 4]),
        (_GOOD_REQUEST, _GOOD_RAW), metadata=[("triton_grpc_error", "true")])],
         note="a failed response ends the stream with its status"),
    Case("stream_grpc_error_header_invalid_request", [_stream(
        (_request("simple", [_tensor("INPUT0", "INT32", [9, 16]),
                             _tensor("INPUT1", "INT32", [9, 16])], id="bad"),
         [raw_tensor(np.resize(_A, (9, 16))), raw_tensor(np.resize(_B, (9, 16)))]),
        (_GOOD_REQUEST, _GOOD_RAW), metadata=[("triton_grpc_error", "true")])],
         note="a request that cannot start is answered in-band even with the header"),
    Case("stream_classification", [_stream(
        (_request("simple", _GOOD_REQUEST["inputs"],
                  outputs=[{"name": "OUTPUT1",
                            "parameters": {"classification": _param(int64_param=2)}}]),
         _GOOD_RAW))]),
]

# -- gRPC limits and methods -----------------------------------------------------------------
_BIG = 5 * 1024 * 1024  # over gRPC's default 4 MiB receive limit
_CASES += [
    Case("message_over_4mib", [
        _infer("types", [_tensor("IN_UINT8", "UINT8", [_BIG]), _tensor("IN_INT32", "INT32", [1])],
               raw=[bytes(_BIG), raw_tensor(np.array([7], np.int32))], outputs=["OUT_INT32"])],
         note="Triton's receive limit is INT32_MAX, not gRPC's default"),
    Case("compressed_request", [Grpc("ModelInfer", _GOOD.request, raw=_GOOD.raw,
                                     compression="gzip")]),
    Case("compressed_stream", [GrpcStream(requests=[_GOOD.request], raw=[_GOOD.raw],
                                          compression="gzip")]),
    Case("unknown_method", [Grpc("ModelInferX"), _GOOD]),
    Case("unknown_service", [Grpc("/inference.NoSuchService/ModelInfer"), _GOOD]),
]

SUITES = [
    Suite("grpc_infer", "grpc_infer", models=_MODELS, cases=_CASES,
          flags=["--exit-on-error=false"], wait_ready=False),
]
