"""RequestValidator: each request rule, with Triton's messages, and reshape for the backend."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.errors import InvalidArgumentError
from infercore.request import InferRequest
from infercore.tensor import DataType, RawInput, Tensor
from infercore.validation import BackendRefusal, RequestValidator

P = "[request id: <id_unknown>] "  # Triton's core prefixes its request errors

BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full shape "
    "including the batch dim in your input dims config, try setting max_batch_size to zero. "
    "See the model configuration docs for more info on max_batch_size."
)

THREE_INPUTS = """
name: "m"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT2" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

WITH_OPTIONAL = """
name: "m"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT2" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OPT" data_type: TYPE_FP32 dims: [ 4 ] optional: true }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def _one_input(
    dims: str,
    *,
    max_batch_size: int = 0,
    data_type: str = "TYPE_FP32",
    extra: str = "",
    outputs: str = 'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
) -> RequestValidator:
    return RequestValidator(
        _config(
            f'name: "m" max_batch_size: {max_batch_size} '
            f'input [ {{ name: "INPUT0" data_type: {data_type} dims: {dims} {extra} }} ] '
            f"{outputs}"
        )
    )


def _fp32(*shape: int) -> Tensor:
    return Tensor.from_object(np.zeros(shape, dtype=np.float32))


def _request(inputs: dict[str, Tensor], **kwargs) -> InferRequest:
    return InferRequest("m", inputs, **kwargs)


def _error(validator: RequestValidator, request: InferRequest) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        validator.validate(request)
    return str(info.value)


# -- input names -----------------------------------------------------------------------


def test_missing_required_inputs_are_named():
    validator = RequestValidator(_config(THREE_INPUTS))
    message = _error(validator, _request({"INPUT0": _fp32(4)}))
    assert message == P + (
        "expected 3 inputs but got 1 inputs for model 'm'. Got input(s) ['INPUT0'], but "
        "missing required input(s) ['INPUT1','INPUT2']. Please provide all required input(s)."
    )


def test_missing_inputs_message_lists_given_inputs_in_tritons_map_order():
    validator = RequestValidator(_config(THREE_INPUTS))
    message = _error(validator, _request({"INPUT2": _fp32(4), "INPUT0": _fp32(4)}))
    assert message == P + (
        "expected 3 inputs but got 2 inputs for model 'm'. Got input(s) ['INPUT0','INPUT2'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s)."
    )


def test_request_without_any_inputs_names_every_required_input():
    validator = RequestValidator(_config(THREE_INPUTS))
    message = _error(validator, _request({}))
    assert message == P + (
        "expected 3 inputs but got 0 inputs for model 'm'. Got input(s) [], but missing "
        "required input(s) ['INPUT0','INPUT1','INPUT2']. Please provide all required input(s)."
    )


def test_missing_required_input_with_optional_inputs_gives_a_range():
    validator = RequestValidator(_config(WITH_OPTIONAL))
    message = _error(validator, _request({"INPUT0": _fp32(4), "OPT": _fp32(4)}))
    assert message == P + (
        "expected number of inputs between 3 and 4 but got 2 inputs for model 'm'. Got "
        "input(s) ['OPT','INPUT0'], but missing required input(s) ['INPUT1','INPUT2']. "
        "Please provide all required input(s)."
    )


def test_optional_input_may_be_left_out():
    validator = RequestValidator(_config(WITH_OPTIONAL))
    request = _request({name: _fp32(4) for name in ("INPUT0", "INPUT1", "INPUT2")})
    validator.validate(request)
    assert request.batch_size == 1


def test_optional_input_may_be_given():
    validator = RequestValidator(_config(WITH_OPTIONAL))
    validator.validate(_request({name: _fp32(4) for name in ("INPUT0", "INPUT1", "INPUT2", "OPT")}))


def test_validator_tables_reflect_the_config():
    validator = RequestValidator(_config(WITH_OPTIONAL))
    assert validator.model_name == "m"
    assert validator.required == ("INPUT0", "INPUT1", "INPUT2")
    assert validator.output_names == frozenset({"OUTPUT0"})
    spec = validator.inputs["OPT"]
    assert spec.optional and spec.fixed
    assert spec.data_type is DataType.FP32
    assert spec.dims == (4,)
    assert spec.reshape is None


def test_an_input_too_many_is_refused_by_count_with_an_empty_missing_list():
    validator = _one_input("[ 4 ]")
    message = _error(validator, _request({"INPUT0": _fp32(4), "EXTRA": _fp32(4)}))
    assert message == P + (
        "expected 1 inputs but got 2 inputs for model 'm'. Got input(s) ['EXTRA','INPUT0'], "
        "but missing required input(s) ]. Please provide all required input(s).")


def test_unexpected_input_within_the_count_is_rejected_without_prefix():
    validator = RequestValidator(_config(WITH_OPTIONAL))
    message = _error(validator, _request(
        {"INPUT0": _fp32(4), "INPUT1": _fp32(4), "INPUT2": _fp32(4), "EXTRA": _fp32(4)}))
    assert message == "unexpected inference input 'EXTRA' for model 'm'"


def test_unexpected_input_replacing_a_required_one_is_rejected_as_unexpected():
    validator = _one_input("[ 4 ]")
    message = _error(validator, _request({"WRONG": _fp32(4)}))
    assert message == "unexpected inference input 'WRONG' for model 'm'"


# -- datatypes -------------------------------------------------------------------------


def test_datatype_mismatch_is_rejected():
    validator = _one_input("[ 4 ]")
    request = _request({"INPUT0": Tensor.from_object(np.zeros(4, dtype=np.float64))})
    assert _error(validator, request) == P + (
        "inference input 'INPUT0' data-type is 'FP64', but model 'm' expects 'FP32'"
    )


def test_bytes_input_matches_type_string():
    validator = _one_input("[ 2 ]", data_type="TYPE_STRING")
    validator.validate(_request({"INPUT0": Tensor.from_object([b"a", b"b"])}))


def test_bytes_given_for_numeric_input_is_rejected():
    validator = _one_input("[ 2 ]", data_type="TYPE_INT32")
    message = _error(validator, _request({"INPUT0": Tensor.from_object([b"a", b"b"])}))
    assert message == P + (
        "inference input 'INPUT0' data-type is 'BYTES', but model 'm' expects 'INT32'")


# -- shapes ----------------------------------------------------------------------------


def test_shape_mismatch_without_batching_has_no_note():
    validator = _one_input("[ 4 ]")
    assert _error(validator, _request({"INPUT0": _fp32(5)})) == P + (
        "unexpected shape for input 'INPUT0' for model 'm'. Expected [4], got [5]. "
    )


def test_shape_rank_mismatch_without_batching_is_rejected():
    validator = _one_input("[ 4 ]")
    assert _error(validator, _request({"INPUT0": _fp32(1, 4)})) == P + (
        "unexpected shape for input 'INPUT0' for model 'm'. Expected [4], got [1,4]. "
    )


def test_shape_mismatch_with_batching_appends_the_batch_note():
    validator = _one_input("[ 4 ]", max_batch_size=8)
    assert _error(validator, _request({"INPUT0": _fp32(2, 5)})) == P + (
        "unexpected shape for input 'INPUT0' for model 'm'. Expected [-1,4], got [2,5]."
        + BATCH_NOTE
    )


def test_input_without_batch_dim_on_batching_model_gets_the_note():
    validator = _one_input("[ 4 ]", max_batch_size=8)
    assert _error(validator, _request({"INPUT0": _fp32(4)})) == P + (
        "unexpected shape for input 'INPUT0' for model 'm'. Expected [-1,4], got [4]." + BATCH_NOTE
    )


def test_scalar_input_on_batching_model_has_no_batch_dim():
    validator = _one_input("[ 4 ]", max_batch_size=8)
    message = _error(validator, _request({"INPUT0": _fp32()}))
    assert message == P + (
        "input 'INPUT0' has no shape but model requires batch dimension for 'm'")


@pytest.mark.parametrize("shape", [(1, 3), (7, 3), (100, 3)])
def test_variable_dims_accept_any_size(shape):
    validator = _one_input("[ -1, 3 ]")
    validator.validate(_request({"INPUT0": _fp32(*shape)}))


def test_variable_dims_still_check_fixed_dims_and_rank():
    validator = _one_input("[ -1, 3 ]")
    assert _error(validator, _request({"INPUT0": _fp32(5, 4)})) == P + (
        "unexpected shape for input 'INPUT0' for model 'm'. Expected [-1,3], got [5,4]. "
    )
    assert "Expected [-1,3], got [5]." in _error(validator, _request({"INPUT0": _fp32(5)}))


def test_variable_dims_with_batching_accept_any_size():
    validator = _one_input("[ -1 ]", max_batch_size=4)
    request = _request({"INPUT0": _fp32(3, 17)})
    validator.validate(request)
    assert request.batch_size == 3
    assert validator.inputs["INPUT0"].fixed is False


def test_zero_sized_dim_is_accepted_when_variable():
    validator = _one_input("[ -1 ]")
    validator.validate(_request({"INPUT0": _fp32(0)}))


# -- batch size ------------------------------------------------------------------------


def test_batch_size_is_set_on_the_request_when_batching():
    validator = _one_input("[ 4 ]", max_batch_size=8)
    request = _request({"INPUT0": _fp32(5, 4)})
    validator.validate(request)
    assert request.batch_size == 5


def test_batch_size_is_one_without_batching():
    validator = _one_input("[ 2, 4 ]")
    request = _request({"INPUT0": _fp32(2, 4)})
    validator.validate(request)
    assert request.batch_size == 1


@pytest.mark.parametrize("batch", [1, 8])
def test_batch_sizes_up_to_max_batch_size_are_accepted(batch):
    validator = _one_input("[ 4 ]", max_batch_size=8)
    request = _request({"INPUT0": _fp32(batch, 4)})
    validator.validate(request)
    assert request.batch_size == batch


def test_batch_size_above_max_batch_size_is_rejected():
    validator = _one_input("[ 4 ]", max_batch_size=8)
    assert _error(validator, _request({"INPUT0": _fp32(9, 4)})) == P + (
        "inference request batch-size must be <= 8 for 'm'"
    )


def test_batch_size_zero_leaves_the_batch_dim_out_of_the_expected_size():
    validator = _one_input("[ 4 ]", max_batch_size=8)
    assert _error(validator, _request({"INPUT0": _fp32(0, 4)})) == P + (
        "input byte size mismatch for input 'INPUT0' for model 'm'. Expected 16, got 0"
    )


def test_inputs_with_different_batch_sizes_are_rejected():
    validator = RequestValidator(
        _config(
            'name: "m" max_batch_size: 8 '
            'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },'
            ' { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ] '
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]'
        )
    )
    message = _error(validator, _request({"A": _fp32(2, 4), "B": _fp32(3, 4)}))
    # Triton walks B first (its map's order): A is the one that does not match
    assert message == P + "input 'A' batch size does not match other inputs for 'm'"


def test_inputs_with_the_same_batch_size_are_accepted():
    validator = RequestValidator(
        _config(
            'name: "m" max_batch_size: 8 '
            'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },'
            ' { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ] '
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]'
        )
    )
    request = _request(
        {"A": _fp32(3, 4), "B": Tensor.from_object(np.zeros((3, 1), dtype=np.int32))}
    )
    validator.validate(request)
    assert request.batch_size == 3


# -- requested outputs -----------------------------------------------------------------


def test_unknown_requested_output_is_rejected():
    validator = _one_input("[ 4 ]")
    request = _request({"INPUT0": _fp32(4)}, requested_outputs=["OUTPUT0", "NOPE"])
    assert _error(validator, request) == "unexpected inference output 'NOPE' for model 'm'"


def test_known_requested_outputs_are_accepted():
    validator = _one_input("[ 4 ]")
    request = _request({"INPUT0": _fp32(4)}, requested_outputs=["OUTPUT0"])
    validator.validate(request)
    assert request.requested_outputs == ("OUTPUT0",)


# -- reshape ---------------------------------------------------------------------------


def test_reshape_is_applied_without_batching():
    validator = _one_input("[ 4 ]", extra="reshape: { shape: [ 2, 2 ] }")
    array = np.arange(4, dtype=np.float32)
    request = _request({"INPUT0": Tensor.from_object(array)})
    validator.validate(request)
    tensor = request.inputs["INPUT0"]
    assert tensor.shape == (2, 2)
    assert tensor.data_type is DataType.FP32
    assert np.shares_memory(tensor.to_numpy(), array)
    np.testing.assert_array_equal(tensor.to_numpy(), [[0, 1], [2, 3]])


def test_reshape_keeps_the_batch_dim_when_batching():
    validator = _one_input("[ 6 ]", max_batch_size=4, extra="reshape: { shape: [ 2, 3 ] }")
    request = _request({"INPUT0": _fp32(3, 6)})
    validator.validate(request)
    assert request.inputs["INPUT0"].shape == (3, 2, 3)
    assert request.batch_size == 3


def test_reshape_to_scalar_item_keeps_only_the_batch_dim():
    validator = _one_input("[ 1 ]", max_batch_size=4, extra="reshape: { shape: [ ] }")
    request = _request({"INPUT0": _fp32(2, 1)})
    validator.validate(request)
    assert request.inputs["INPUT0"].shape == (2,)


def test_reshape_resolves_a_variable_dim_from_the_element_count():
    validator = _one_input("[ -1 ]", max_batch_size=4, extra="reshape: { shape: [ -1, 2 ] }")
    request = _request({"INPUT0": _fp32(2, 6)})
    validator.validate(request)
    assert request.inputs["INPUT0"].shape == (2, 3, 2)


def test_shape_is_checked_against_dims_not_reshape():
    validator = _one_input("[ 4 ]", extra="reshape: { shape: [ 2, 2 ] }")
    message = _error(validator, _request({"INPUT0": _fp32(2, 2)}))
    assert message == P + (
        "unexpected shape for input 'INPUT0' for model 'm'. Expected [4], got [2,2]. "
    )


def test_only_inputs_with_reshape_are_reshaped():
    validator = RequestValidator(
        _config(
            'name: "m" max_batch_size: 0 '
            'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 4, 1 ] } },'
            ' { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ] '
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]'
        )
    )
    b = _fp32(4)
    request = _request({"A": _fp32(4), "B": b})
    validator.validate(request)
    assert request.inputs["A"].shape == (4, 1)
    assert request.inputs["B"] is b


def test_validation_without_reshape_leaves_input_tensors_untouched():
    validator = _one_input("[ 4 ]", max_batch_size=2)
    tensor = _fp32(2, 4)
    request = _request({"INPUT0": tensor})
    validator.validate(request)
    assert request.inputs["INPUT0"] is tensor


# -- Triton's order of checks, and inputs whose data does not fit --------------------------


def test_the_request_id_is_in_the_prefix():
    validator = _one_input("[ 4 ]")
    message = _error(validator, _request({"INPUT0": _fp32(5)}, id="req-9"))
    assert message.startswith("[request id: req-9] unexpected shape")


def test_duplicate_requested_outputs_are_refused():
    validator = _one_input("[ 4 ]")
    request = _request({"INPUT0": _fp32(4)}, requested_outputs=["OUTPUT0", "OUTPUT0"])
    assert _error(validator, request) == "output 'OUTPUT0' already exists in request"


def test_the_least_unknown_output_is_named_before_any_input_problem():
    validator = _one_input("[ 4 ]")
    request = _request({}, requested_outputs=["ZZ", "AA", "OUTPUT0"])
    assert _error(validator, request) == "unexpected inference output 'AA' for model 'm'"


def test_an_input_of_the_wrong_size_is_refused_after_the_shape_checks():
    validator = RequestValidator(_config(THREE_INPUTS))
    request = _request({"INPUT0": RawInput(DataType.FP32, (4,), 12), "INPUT1": _fp32(4),
                        "INPUT2": _fp32(5)})
    assert "unexpected shape for input 'INPUT2'" in _error(validator, request)
    request.inputs["INPUT2"] = _fp32(4)
    assert _error(validator, request) == P + (
        "input byte size mismatch for input 'INPUT0' for model 'm'. Expected 16, got 12")


def test_an_unknown_datatype_is_named_invalid():
    validator = _one_input("[ 4 ]")
    request = _request({"INPUT0": RawInput(None, (4,), 16)})
    assert _error(validator, request) == P + (
        "inference input 'INPUT0' data-type is '<invalid>', but model 'm' expects 'FP32'")


def test_a_wildcard_dim_in_a_request_is_refused():
    validator = _one_input("[ -1 ]")
    request = _request({"INPUT0": RawInput(DataType.FP32, (-1,), 4)})
    assert _error(validator, request) == P + (
        "All input dimensions should be specified for input 'INPUT0' for model 'm', got [-1]")


def test_a_negative_batch_dim_is_read_as_tritons_uint32_batch_size():
    validator = _one_input("[ 2 ]", max_batch_size=4)
    request = _request({"INPUT0": RawInput(DataType.FP32, (-1, 2), 8)})
    assert _error(validator, request) == P + (
        "input byte size mismatch for input 'INPUT0' for model 'm'. Expected 34359738360, "
        "got 8")


@pytest.mark.parametrize(("data", "shape", "message"), [
    (b"\x01\x00\x00\x00a\x09\x00\x00\x00bc", (2,),
     "incomplete string data for inference input 'INPUT0', expecting string of length 9 "
     "but only 2 bytes available"),
    (b"\x01\x00", (1,),
     P + "incomplete string length indicator for inference input 'INPUT0' for model 'm', "
     "expecting 4 bytes but only 2 bytes available. Please make sure the string length "
     "indicator is in one buffer."),
    (b"\x01\x00\x00\x00a\x01\x00\x00\x00b", (1,),
     P + "unexpected number of string elements 2 for inference input 'INPUT0' for model 'm', "
     "expecting 1"),
    (b"\x01\x00\x00\x00a", (2,),
     P + "expected 2 string elements for inference input 'INPUT0' for model 'm', got 1"),
])
def test_malformed_bytes_data_gets_tritons_message(data, shape, message):
    validator = _one_input("[ -1 ]", data_type="TYPE_STRING")
    request = _request({"INPUT0": RawInput(DataType.BYTES, shape, len(data), data)})
    assert _error(validator, request) == message


# -- raw binary requests (HTTP, Inference-Header-Content-Length: 0) -----------------------


def _raw(body: bytes) -> InferRequest:
    request = _request({})
    request.raw_input = body
    return request


def test_a_raw_input_takes_the_single_variable_dim_from_its_size():
    request = _raw(np.arange(6, dtype=np.float32).tobytes())
    _one_input("[ -1, 2 ]").validate(request)
    assert request.inputs["INPUT0"].shape == (3, 2)


def test_a_raw_input_of_a_batching_model_is_a_batch_of_one():
    validator = _one_input("[ 2 ]", max_batch_size=4)
    request = _raw(b"\0" * 8)
    validator.validate(request)
    assert request.inputs["INPUT0"].shape == (1, 2)
    assert _error(validator, _raw(b"\0" * 16)) == P + (
        "input byte size mismatch for input 'raw_input' for model 'm'. Expected 8, got 16")


def test_a_raw_bytes_input_is_one_element_holding_the_whole_body():
    request = _raw(b"427")
    _one_input("[ 1 ]", data_type="TYPE_STRING").validate(request)
    assert request.inputs["INPUT0"].to_bytes_array().tolist() == [b"427"]


@pytest.mark.parametrize("config, message", [
    (THREE_INPUTS, "Raw request must only have 1 input (found 1) to be deduced but got 3 "
                   "inputs in 'm' model configuration"),
    ('name: "m" input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]',
     "The shape of the raw input 'X' can not be deduced because there are more than one "
     "variable-sized dimension"),
    ('name: "m" input [ { name: "X" data_type: TYPE_STRING dims: [ -1 ] } ]',
     "For BYTE datatype raw input 'X', the model must have input shape [1]"),
])
def test_raw_inputs_triton_cannot_deduce_are_refused(config, message):
    assert _error(RequestValidator(_config(config)), _raw(b"\0" * 8)) == P + message


@pytest.mark.parametrize("backend", ["python", "onnxruntime"])
def test_a_batching_model_sent_no_inputs_is_refused_where_triton_refuses_it(backend):
    validator = RequestValidator(_config(f'''
        name: "m" backend: "{backend}" max_batch_size: 4
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] optional: true }} ]'''))
    with pytest.raises(InvalidArgumentError) as refused:
        validator.validate(InferRequest("m", {}, id="r1"))
    if backend == "python":  # Triton's Python backend refuses it, counted as a failure
        assert isinstance(refused.value, BackendRefusal)
        assert refused.value.message == (
            "[request id: r1] out of bounds index 0: request has 0 inputs")
    else:
        assert not isinstance(refused.value, BackendRefusal)
        assert "batch-size must be >= 1" in refused.value.message
