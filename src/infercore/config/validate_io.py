"""Validation of inputs, outputs, batch inputs and batch outputs (Triton's ValidateModelIOConfig).

Each check returns a message or None; the caller appends " for <model>" as Triton does and
raises. Messages are Triton's where Triton has the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias

from tritonclient.grpc import model_config_pb2

from .platform import TENSORRT_PLATFORM

__all__ = ["io_errors"]

WILDCARD_DIM = -1

_IO: TypeAlias = "model_config_pb2.ModelInput | model_config_pb2.ModelOutput"
_Input = model_config_pb2.ModelInput
_BatchInput = model_config_pb2.BatchInput
_BatchOutput = model_config_pb2.BatchOutput

_KNOWN_DATA_TYPES = frozenset(model_config_pb2.DataType.values())
_IMAGE_FORMATS = frozenset({_Input.FORMAT_NHWC, _Input.FORMAT_NCHW})
_BATCH_INPUT_KINDS = frozenset(model_config_pb2.BatchInput.Kind.values())
_BATCH_OUTPUT_KINDS = frozenset({_BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE})
_BATCH_INPUT_TYPES = frozenset({model_config_pb2.TYPE_INT32, model_config_pb2.TYPE_FP32})


def io_errors(config: model_config_pb2.ModelConfig) -> Iterator[str]:
    """Yield the problems with the config's tensors, in Triton's order."""
    for io in config.input:
        yield from _shape_errors(io, config.max_batch_size, "model input ")
        if io.format in _IMAGE_FORMATS and len(io.dims) != 3:
            yield "model input NHWC/NCHW require 3 dims"
        yield from _platform_errors(io, config.platform, "input")
    for io in config.output:
        yield from _shape_errors(io, config.max_batch_size, "model output ")
        yield from _platform_errors(io, config.platform, "output")
    yield from _duplicate_errors(config.input, "model input ")
    yield from _duplicate_errors(config.output, "model output ")
    yield from _batch_io_errors(config)


def _shape_errors(io: _IO, max_batch_size: int, prefix: str) -> Iterator[str]:
    """Triton's ValidateIOShape."""
    if not io.name:
        yield prefix + "must specify 'name'"
        return
    prefix = f"{prefix}'{io.name}' "
    if io.data_type == model_config_pb2.TYPE_INVALID:
        yield prefix + "must specify 'data_type'"
    elif io.data_type not in _KNOWN_DATA_TYPES:
        yield prefix + f"has unknown 'data_type' {io.data_type}"
    if not io.dims:
        # Triton has no scalar dims: a scalar is dims [1] with an empty reshape.
        yield prefix + "must specify 'dims'"
    has_reshape = io.HasField("reshape")
    if has_reshape and not io.reshape.shape and max_batch_size == 0:
        yield (
            prefix + "cannot have empty reshape for non-batching model as scalar tensors "
            "are not supported"
        )
    if not _dims_valid(io.dims):
        yield (
            prefix + f"dimension must be integer >= 1, or {WILDCARD_DIM} to indicate a "
            "variable-size dimension"
        )
    elif has_reshape:
        if not _dims_valid(io.reshape.shape):
            yield (
                prefix + f"reshape dimensions must be integer >= 1, or {WILDCARD_DIM} to "
                "indicate a variable-size dimension"
            )
        else:
            problem = _reshape_problem(io.dims, io.reshape.shape)
            if problem:
                yield prefix + problem


def _dims_valid(dims: Iterable[int]) -> bool:
    return all(dim >= 1 or dim == WILDCARD_DIM for dim in dims)


def _element_count(dims: Sequence[int]) -> int:
    """Triton's GetElementCount: -1 with any wildcard, 0 for no dims, else the product."""
    if not dims:
        return 0
    count = 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            return WILDCARD_DIM
        count *= dim
    return count


def _chunk_counts(dims: Sequence[int]) -> list[int]:
    """Element counts of the runs of fixed dims between wildcards: [2,4,-1,6] -> [8, 6]."""
    counts, current = [], 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            counts.append(current)
            current = 1
        else:
            current *= dim
    counts.append(current)
    return counts


def _reshape_problem(dims: Sequence[int], shape: Sequence[int]) -> str | None:
    dims_size, reshape_size = _element_count(dims), _element_count(shape)
    # An empty reshape (a scalar) needs dims holding exactly one element.
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        return "has different size for dims and reshape"
    if dims_size == WILDCARD_DIM:
        # With wildcards, each run of fixed dims must hold as many elements as its
        # counterpart: [2, 4, -1, 6] -> [8, -1, 1, 6] is fine.
        dims_chunks, shape_chunks = _chunk_counts(dims), _chunk_counts(shape)
        if len(dims_chunks) != len(shape_chunks):
            return "has different number of variable-size dimensions for dims and reshape"
        if dims_chunks != shape_chunks:
            return "has different size for dims and reshape"
    return None


def _platform_errors(io: _IO, platform: str, direction: str) -> Iterator[str]:
    if io.is_shape_tensor and platform != TENSORRT_PLATFORM:
        yield "shape tensors are only supported for TensorRT platform"
    if io.is_non_linear_format_io:
        if platform != TENSORRT_PLATFORM:
            yield "Non-linear IO format is only supported for the TensorRT platform"
        elif len(io.dims) != 3:
            yield f"Non-linear IO format {direction} requires 3 dims"


def _duplicate_errors(ios: Iterable[_IO], prefix: str) -> Iterator[str]:
    # Triton's core does not check this (backends trip over it later); a clear error at
    # load time is kinder than a model whose second tensor silently shadows the first.
    seen: set[str] = set()
    for io in ios:
        if io.name in seen:
            yield f"{prefix}'{io.name}' is specified more than once"
        seen.add(io.name)


def _batch_io_errors(config: model_config_pb2.ModelConfig) -> Iterator[str]:
    """Triton's ValidateBatchIO."""
    input_names = {io.name for io in config.input}
    output_names = {io.name for io in config.output}
    for batch_input in config.batch_input:
        if batch_input.kind not in _BATCH_INPUT_KINDS:
            yield f"unknown batch input kind '{batch_input.kind}'"
        elif len(batch_input.source_input) != 1:
            yield (
                f"batch input kind '{_BatchInput.Kind.Name(batch_input.kind)}' expects 1 "
                f"source input, got {len(batch_input.source_input)}"
            )
        if batch_input.data_type not in _BATCH_INPUT_TYPES:
            yield "batch input data type must be TYPE_INT32 or TYPE_FP32"
        yield from _unknown_names(batch_input.source_input, input_names, "source input")
    for batch_output in config.batch_output:
        if batch_output.kind not in _BATCH_OUTPUT_KINDS:
            yield f"unknown batch output kind '{batch_output.kind}'"
        elif len(batch_output.source_input) != 1:
            yield (
                f"batch output kind '{_BatchOutput.Kind.Name(batch_output.kind)}' expects 1 "
                f"source input, got {len(batch_output.source_input)}"
            )
        yield from _unknown_names(batch_output.source_input, input_names, "source input")
        yield from _unknown_names(batch_output.target_name, output_names, "target output")
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target in targets:
                yield f"target output name '{target}' can only be specified once"
            targets.add(target)


def _unknown_names(names: Iterable[str], known: set[str], what: str) -> Iterator[str]:
    for name in names:
        if name not in known:
            yield f"unknown {what} name '{name}'"
