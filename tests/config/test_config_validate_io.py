"""validate_model_config: tensor and sequence batching rules, with Triton's messages."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.config import normalize_model_config, validate_model_config
from infercore.errors import InvalidArgumentError

INPUT = 'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]'
OUTPUT = 'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]'


def _text(
    *,
    name: str = "add_sub",
    backend: str = "python",
    platform: str = "",
    max_batch_size: int = 8,
    inputs: str = INPUT,
    outputs: str = OUTPUT,
    extra: str = "",
) -> str:
    return (
        f'name: "{name}" backend: "{backend}" platform: "{platform}" '
        f"max_batch_size: {max_batch_size} {inputs} {outputs} {extra}"
    )


def _normalized(text: str, gpu_count: int = 0) -> model_config_pb2.ModelConfig:
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    normalize_model_config(config, model_name="add_sub", gpu_count=gpu_count)
    return config


def _message(text: str, **kwargs) -> str:
    gpu_count = kwargs.get("gpu_count", 0)
    config = _normalized(text, gpu_count)
    with pytest.raises(InvalidArgumentError) as info:
        validate_model_config(config, model_name="add_sub", **kwargs)
    return str(info.value)


# inputs and outputs


def _io(dims: str = "[ 4 ]", extra: str = "", data_type: str = "TYPE_FP32") -> str:
    return f'input [ {{ name: "INPUT0" data_type: {data_type} dims: {dims} {extra} }} ]'


IO_CASES = [
    pytest.param(
        _text(inputs="input [ { data_type: TYPE_FP32 dims: [ 1 ] } ]"),
        "model input must specify 'name' for add_sub",
        id="input-without-name",
    ),
    pytest.param(
        _text(outputs="output [ { data_type: TYPE_FP32 dims: [ 1 ] } ]"),
        "model output must specify 'name' for add_sub",
        id="output-without-name",
    ),
    pytest.param(
        _text(inputs='input [ { name: "INPUT0" dims: [ 1 ] } ]'),
        "model input 'INPUT0' must specify 'data_type' for add_sub",
        id="type-invalid",
    ),
    pytest.param(
        _text(inputs=_io(data_type="99")),
        "model input 'INPUT0' has unknown 'data_type' 99 for add_sub",
        id="type-unknown",
    ),
    pytest.param(
        _text(inputs=_io(dims="[ ]")),
        "model input 'INPUT0' must specify 'dims' for add_sub",
        id="dims-empty",
    ),
    pytest.param(
        _text(outputs='output [ { name: "OUTPUT0" data_type: TYPE_FP32 } ]'),
        "model output 'OUTPUT0' must specify 'dims' for add_sub",
        id="output-dims-empty",
    ),
    pytest.param(
        _text(inputs=_io(dims="[ 4, 0 ]")),
        "model input 'INPUT0' dimension must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for add_sub",
        id="dims-zero",
    ),
    pytest.param(
        _text(inputs=_io(dims="[ -2 ]")),
        "model input 'INPUT0' dimension must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for add_sub",
        id="dims-below-wildcard",
    ),
    pytest.param(
        _text(inputs=_io(extra="reshape { shape: [ 2, 0 ] }")),
        "model input 'INPUT0' reshape dimensions must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for add_sub",
        id="reshape-zero",
    ),
    pytest.param(
        _text(inputs=_io(extra="reshape { shape: [ 3 ] }")),
        "model input 'INPUT0' has different size for dims and reshape for add_sub",
        id="reshape-size",
    ),
    pytest.param(
        _text(inputs=_io(dims="[ 2, -1 ]", extra="reshape { shape: [ 2 ] }")),
        "model input 'INPUT0' has different size for dims and reshape for add_sub",
        id="reshape-wildcard-vs-fixed",
    ),
    pytest.param(
        _text(inputs=_io(dims="[ 2, -1, 3 ]", extra="reshape { shape: [ 2, -1, -1, 3 ] }")),
        "model input 'INPUT0' has different number of variable-size dimensions for dims and "
        "reshape for add_sub",
        id="reshape-wildcard-runs",
    ),
    pytest.param(
        _text(inputs=_io(dims="[ 2, 4, -1, 6 ]", extra="reshape { shape: [ 4, -1, 12 ] }")),
        "model input 'INPUT0' has different size for dims and reshape for add_sub",
        id="reshape-wildcard-run-size",
    ),
    pytest.param(
        _text(max_batch_size=0, inputs=_io(dims="[ 1 ]", extra="reshape { shape: [ ] }")),
        "model input 'INPUT0' cannot have empty reshape for non-batching model as scalar "
        "tensors are not supported for add_sub",
        id="scalar-reshape-without-batching",
    ),
    pytest.param(
        _text(
            inputs='input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] }, '
            '{ name: "A" data_type: TYPE_INT32 dims: [ 2 ] } ]'
        ),
        "model input 'A' is specified more than once for add_sub",
        id="duplicate-input",
    ),
    pytest.param(
        _text(
            outputs='output [ { name: "B" data_type: TYPE_FP32 dims: [ 1 ] }, '
            '{ name: "B" data_type: TYPE_FP32 dims: [ 1 ] } ]'
        ),
        "model output 'B' is specified more than once for add_sub",
        id="duplicate-output",
    ),
    pytest.param(
        _text(inputs=_io(extra="format: FORMAT_NCHW")),
        "model input NHWC/NCHW require 3 dims for add_sub",
        id="image-format-dims",
    ),
    pytest.param(
        _text(inputs=_io(extra="is_shape_tensor: true")),
        "shape tensors are only supported for TensorRT platform for add_sub",
        id="shape-tensor-not-tensorrt",
    ),
    pytest.param(
        _text(
            outputs='output [ { name: "O" data_type: TYPE_INT32 dims: [ 1 ] '
            "is_shape_tensor: true } ]"
        ),
        "shape tensors are only supported for TensorRT platform for add_sub",
        id="output-shape-tensor-not-tensorrt",
    ),
    pytest.param(
        _text(inputs=_io(extra="is_non_linear_format_io: true")),
        "Non-linear IO format is only supported for the TensorRT platform for add_sub",
        id="non-linear-not-tensorrt",
    ),
    pytest.param(
        _text(
            backend="tensorrt",
            platform="tensorrt_plan",
            inputs=_io(dims="[ 4, 4 ]", extra="is_non_linear_format_io: true"),
        ),
        "Non-linear IO format input requires 3 dims for add_sub",
        id="non-linear-dims",
    ),
    pytest.param(
        _text(
            extra='batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" '
            'data_type: TYPE_INT32 source_input: [ "INPUT0", "INPUT0" ] } ]'
        ),
        "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 2 for add_sub",
        id="batch-input-sources",
    ),
    pytest.param(
        _text(
            extra='batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" '
            'data_type: TYPE_FP16 source_input: [ "INPUT0" ] } ]'
        ),
        "batch input data type must be TYPE_INT32 or TYPE_FP32 for add_sub",
        id="batch-input-type",
    ),
    pytest.param(
        _text(
            extra='batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" '
            'data_type: TYPE_INT32 source_input: [ "NOPE" ] } ]'
        ),
        "unknown source input name 'NOPE' for add_sub",
        id="batch-input-source-name",
    ),
    pytest.param(
        _text(
            extra="batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE "
            'target_name: [ "NOPE" ] source_input: [ "INPUT0" ] } ]'
        ),
        "unknown target output name 'NOPE' for add_sub",
        id="batch-output-target",
    ),
]


@pytest.mark.parametrize(("text", "expected"), IO_CASES)
def test_io_rules(text, expected):
    assert _message(text) == expected


@pytest.mark.parametrize(
    ("dims", "shape"),
    [
        ("[ 2, 4, -1, 6 ]", "[ 8, -1, 1, 6 ]"),
        ("[ 1 ]", "[ ]"),
        ("[ 2, 3 ]", "[ 6 ]"),
        ("[ -1 ]", "[ -1 ]"),
    ],
)
def test_compatible_reshapes_pass(dims, shape):
    text = _text(inputs=_io(dims=dims, extra=f"reshape {{ shape: {shape} }}"))

    validate_model_config(_normalized(text), model_name="add_sub")


def test_wildcard_dims_pass():
    validate_model_config(_normalized(_text(inputs=_io(dims="[ -1, 3 ]"))), model_name="add_sub")


def test_same_name_for_an_input_and_an_output_is_allowed():
    text = _text(outputs='output [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]')

    validate_model_config(_normalized(text), model_name="add_sub")


def test_shape_tensor_on_tensorrt_passes():
    text = _text(
        backend="tensorrt", platform="tensorrt_plan", inputs=_io(extra="is_shape_tensor: true")
    )

    validate_model_config(_normalized(text), model_name="add_sub")


# sequence batching

SEQUENCE_CASES = [
    pytest.param(
        "sequence_batching { } response_cache { enable: true }",
        "Response Cache does not currently support model add_sub with sequence batching "
        "scheduler. Please disable the response cache.",
        id="cache",
    ),
    pytest.param(
        'sequence_batching { control_input [ { name: "S" control [ { kind: '
        "CONTROL_SEQUENCE_START } ] } ] }",
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
        "'bool_false_true' for CONTROL_SEQUENCE_START for add_sub",
        id="start-without-values",
    ),
    pytest.param(
        'sequence_batching { control_input [ { name: "S" control [ { kind: '
        "CONTROL_SEQUENCE_START int32_false_true: [ 0 ] } ] } ] }",
        "sequence batching control 'int32_false_true' must have exactly 2 entries for "
        "CONTROL_SEQUENCE_START for add_sub",
        id="start-one-value",
    ),
    pytest.param(
        'sequence_batching { control_input [ { name: "S" control [ { kind: '
        "CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } ] } ] }",
        "sequence batching specifies more than one from 'int32_false_true', "
        "'fp32_false_true' and 'bool_false_true' for CONTROL_SEQUENCE_END for add_sub",
        id="end-two-kinds",
    ),
    pytest.param(
        "sequence_batching { control_input [ "
        '{ name: "S" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ 0, 1 ] } ] }, '
        '{ name: "T" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ 0, 1 ] } ] } ] }',
        "sequence batching specifies multiple CONTROL_SEQUENCE_READY tensors for add_sub",
        id="ready-twice",
    ),
    pytest.param(
        "sequence_batching { control_input [ "
        '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }, '
        '{ name: "S" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] } ] }',
        "sequence batching control tensor 'S' is specified for multiple control kinds for add_sub",
        id="tensor-twice",
    ),
    pytest.param(
        "sequence_batching { control_input [ { control [ { kind: CONTROL_SEQUENCE_START "
        "int32_false_true: [ 0, 1 ] } ] } ] }",
        "sequence batching control tensor must have a name for add_sub",
        id="tensor-without-name",
    ),
    pytest.param(
        'sequence_batching { control_input [ { name: "C" control [ { kind: '
        "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }",
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for add_sub. Allowed data "
        "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
        id="corrid-type",
    ),
    pytest.param(
        "sequence_batching { oldest { preferred_batch_size: [ 9 ] } }",
        "sequence batching preferred batch size must be <= max batch size for add_sub",
        id="oldest-preferred",
    ),
    pytest.param(
        "sequence_batching { direct { minimum_slot_utilization: 1.5 } }",
        "sequence batching minimum slot utilization must be in range (0.0, 1.0] for add_sub",
        id="slot-utilization",
    ),
]


@pytest.mark.parametrize(("extra", "expected"), SEQUENCE_CASES)
def test_sequence_rules(extra, expected):
    assert _message(_text(extra=extra)) == expected


def test_well_formed_sequence_controls_pass():
    extra = (
        "sequence_batching { control_input [ "
        '{ name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] }, '
        '{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } '
        "] }"
    )

    validate_model_config(_normalized(_text(extra=extra)), model_name="add_sub")
