"""KServe v2 gRPC requests -> the engine's InferRequest (responses: ``grpc_encode``).

``decode_request`` turns a ``ModelInferRequest`` into an ``InferRequest`` plus what the
reply needs to know (classification and shared-memory outputs, the stream-only
``triton_enable_empty_final_response`` switch), as Triton's gRPC frontend reads it:

- Input data comes from ``raw_input_contents`` (taken in input order by the inputs that
  have neither ``contents`` nor shared memory), from the typed ``contents`` fields, or from
  a registered system shared memory region. Raw and shared-memory data become numpy views
  over the received bytes, without copies. FP16 and BF16 travel only raw, as in Triton.
- Request parameters ``sequence_id``, ``sequence_start``, ``sequence_end``, ``priority`` and
  ``timeout`` set the request's fields; other keys reach the model as parameters, and keys
  starting with ``triton_`` are reserved.

Pure functions: no state, no threads; the frontend calls them on its event-loop thread.
Error texts follow Triton's, since clients match on them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import service_pb2

from ..errors import InvalidArgumentError
from ..request import InferRequest
from ..tensor import DataType, Tensor, deserialize_bytes_tensor
from .kserve import InputByteSizeError
from .shm import SystemSharedMemory

__all__ = ["DecodedRequest", "OutputSpec", "decode_request", "parse_version"]

# The `triton_` request parameters Triton accepts (all others are reserved).
RESERVED_PARAMETERS = ("triton_enable_empty_final_response",)

_DATA_TYPES: dict[str, DataType] = {dt.value: dt for dt in DataType}
_NUMPY: dict[DataType, np.dtype] = {dt: dt.numpy_dtype for dt in DataType}

# Which datatype each typed `contents` field carries. int_contents / uint_contents also
# carry the narrower INT8/INT16 and UINT8/UINT16 (Triton keeps each element's low bytes).
_CONTENT_TYPES: dict[str, DataType] = {
    "bool_contents": DataType.BOOL,
    "int_contents": DataType.INT32,
    "int64_contents": DataType.INT64,
    "uint_contents": DataType.UINT32,
    "uint64_contents": DataType.UINT64,
    "fp32_contents": DataType.FP32,
    "fp64_contents": DataType.FP64,
    "bytes_contents": DataType.BYTES,
}
_NARROW = {
    ("int_contents", DataType.INT8),
    ("int_contents", DataType.INT16),
    ("uint_contents", DataType.UINT8),
    ("uint_contents", DataType.UINT16),
}

@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What a requested output asks of the reply: classification or a shared memory target."""

    classification: int = 0
    region: str = ""
    offset: int = 0
    byte_size: int = 0


@dataclass(slots=True)
class DecodedRequest:
    request: InferRequest
    # name -> spec, only for outputs with classification or shared memory (None: none)
    outputs: dict[str, OutputSpec] | None
    empty_final_response: bool  # triton_enable_empty_final_response (streams only)


_STOL = re.compile(r"\s*([+-]?[0-9]+)")
_INT64_MAX = (1 << 63) - 1


def parse_version(text: str) -> int:
    """A model version string as Triton reads it: "" is -1 (the latest ready version).

    Triton parses it with ``std::stol``: leading blanks and trailing text are ignored
    ("1abc" is 1, "0x1" is 0), and only a missing number or one past int64 is an error.
    """
    if not text:
        return -1
    match = _STOL.match(text)
    version = int(match.group(1)) if match else None
    if version is None or not -_INT64_MAX - 1 <= version <= _INT64_MAX:
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{text}' "
            "(details: stol), version should be an integral value > 0")
    if version < 0:
        raise InvalidArgumentError(
            f"invalid model version specified '{text}' , version should be an integral "
            "value > 0")
    return version


# -- requests ------------------------------------------------------------------------------
def decode_request(
    msg: service_pb2.ModelInferRequest, shm: SystemSharedMemory
) -> DecodedRequest:
    """Build the engine request for ``msg``; raises InvalidArgumentError / NotFoundError."""
    model = msg.model_name
    tensors: dict[str, Tensor] = {}
    raw = msg.raw_input_contents
    raw_count = len(raw)
    raw_index = 0
    for io in msg.inputs:
        name = io.name
        data_type = _DATA_TYPES.get(io.datatype)
        if data_type is None:
            raise InvalidArgumentError(
                f"invalid datatype '{io.datatype}' for input '{name}' of model '{model}'"
            )
        shape = tuple(io.shape)
        if name in tensors:
            raise InvalidArgumentError(f"input '{name}' already exists in request")
        region = _shared_memory(io, shm) if io.parameters else None
        if region is not None:
            if io.HasField("contents"):
                raise InvalidArgumentError(
                    f"unexpected 'content' provided when using shared memory for input tensor "
                    f"'{name}' for model '{model}'"
                )
            array = _from_buffer(region, data_type, shape, name, model)
        elif io.HasField("contents"):
            if raw_count:
                raise InvalidArgumentError(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model}'"
                )
            array = _from_contents(io.contents, data_type, shape, name, model)
        elif raw_index < raw_count:
            array = _from_buffer(raw[raw_index], data_type, shape, name, model)
            raw_index += 1
        else:
            raise InvalidArgumentError(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        tensors[name] = Tensor(data_type, array)

    requested: list[str] | None = None
    specs: dict[str, OutputSpec] | None = None
    if msg.outputs:
        requested = []
        for out in msg.outputs:
            requested.append(out.name)
            if out.parameters:
                spec = _output_spec(out)
                if spec is not None:
                    if specs is None:
                        specs = {}
                    specs[out.name] = spec

    request = InferRequest(model, tensors, model_version=parse_version(msg.model_version),
                           id=msg.id, requested_outputs=requested)
    empty_final = False
    if msg.parameters:
        empty_final = _apply_parameters(request, msg.parameters)
    return DecodedRequest(request, specs, empty_final)


def _element_count(shape: tuple[int, ...], name: str, model: str) -> int:
    if shape and min(shape) < 0:
        raise InvalidArgumentError(
            f"unexpected shape for input '{name}' for model '{model}': dimensions must "
            f"be >= 0, got [{','.join(str(d) for d in shape)}]"
        )
    return math.prod(shape)


def _from_buffer(buffer: bytes | memoryview, data_type: DataType, shape: tuple[int, ...],
                 name: str, model: str) -> np.ndarray:
    """A numpy view of raw (or shared memory) tensor bytes, checked against the shape."""
    count = _element_count(shape, name, model)
    if data_type is DataType.BYTES:
        try:
            return deserialize_bytes_tensor(buffer, count).reshape(shape)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"invalid BYTES data for input '{name}' for model '{model}': {exc.message}"
            ) from None
    dtype = _NUMPY[data_type]
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        raise InputByteSizeError(name, data_type.value, model, expected, len(buffer))
    return np.frombuffer(buffer, dtype).reshape(shape)


def _from_contents(contents: service_pb2.InferTensorContents, data_type: DataType,
                   shape: tuple[int, ...], name: str, model: str) -> np.ndarray:
    """The typed ``contents`` of an input, as Triton's frontend accepts them."""
    fields = contents.ListFields()  # only the non-empty repeated fields
    count = _element_count(shape, name, model)
    if not fields:
        values: list[object] = []
    else:
        if len(fields) > 1:
            raise InvalidArgumentError(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}', binary data was already supplied."
            )
        field, field_values = fields[0]
        carried = _CONTENT_TYPES[field.name]
        if carried is not data_type and (field.name, data_type) not in _NARROW:
            raise InvalidArgumentError(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}' of type '{carried.value}', expected datatype '{data_type.value}'"
            )
        values = list(field_values)
    if len(values) != count:
        if data_type is DataType.BYTES:
            raise InvalidArgumentError(
                f"expected {count} string elements for inference input '{name}' for model "
                f"'{model}', got {len(values)}"
            )
        size = data_type.byte_size
        raise InputByteSizeError(name, data_type.value, model, count * size,
                                 len(values) * size)
    if data_type is DataType.BYTES:
        array = np.empty(count, dtype=np.object_)
        array[:] = values
        return array.reshape(shape)
    if data_type in (DataType.INT8, DataType.INT16):
        return np.array(values, dtype=np.int32).astype(_NUMPY[data_type]).reshape(shape)
    if data_type in (DataType.UINT8, DataType.UINT16):
        return np.array(values, dtype=np.uint32).astype(_NUMPY[data_type]).reshape(shape)
    return np.array(values, dtype=_NUMPY[data_type]).reshape(shape)


def _shared_memory(
    tensor: service_pb2.ModelInferRequest.InferInputTensor, shm: SystemSharedMemory
) -> memoryview | None:
    """The bytes of an input placed in shared memory, or None when it is not."""
    location = _shared_memory_params(tensor.name, tensor.parameters)
    if location is None:
        return None
    region, offset, byte_size = location
    return shm.region(region).view(offset, byte_size)


def _shared_memory_params(
    name: str, parameters: Mapping[str, service_pb2.InferParameter]
) -> tuple[str, int, int] | None:
    """(region, offset, byte_size) from a tensor's shared_memory_* parameters."""
    region_param = parameters.get("shared_memory_region")
    offset_param = parameters.get("shared_memory_offset")
    size_param = parameters.get("shared_memory_byte_size")
    if region_param is None:
        for key, present in (("shared_memory_offset", offset_param),
                             ("shared_memory_byte_size", size_param)):
            if present is not None:
                raise InvalidArgumentError(
                    f"'{key}' can not be specified without 'shared_memory_region' parameter "
                    f"for tensor '{name}'"
                )
        return None
    if region_param.WhichOneof("parameter_choice") != "string_param":
        raise InvalidArgumentError(
            f"invalid value type for 'shared_memory_region' parameter for tensor '{name}', "
            "expected string_param."
        )
    offset = 0
    if offset_param is not None:
        if offset_param.WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgumentError(
                f"invalid value type for 'shared_memory_offset' parameter for tensor "
                f"'{name}', expected int64_param."
            )
        offset = offset_param.int64_param
    if size_param is None:
        raise InvalidArgumentError(
            f"'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor '{name}'"
        )
    if size_param.WhichOneof("parameter_choice") != "int64_param":
        raise InvalidArgumentError(
            f"invalid value type for 'shared_memory_byte_size' parameter for tensor "
            f"'{name}', expected int64_param."
        )
    return region_param.string_param, offset, size_param.int64_param


def _output_spec(
    out: service_pb2.ModelInferRequest.InferRequestedOutputTensor,
) -> OutputSpec | None:
    location = _shared_memory_params(out.name, out.parameters)
    count = 0
    classification = out.parameters.get("classification")
    if classification is not None:
        if classification.WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgumentError(
                "invalid value type for 'classification' parameter, expected int64_param"
            )
        count = classification.int64_param
        if count <= 0:
            raise InvalidArgumentError(
                "invalid value for 'classification' parameter, expected >= 0"
            )
    if location is not None and count:
        raise InvalidArgumentError(
            "output can't set both 'shared_memory_region' and 'classification'"
        )
    if location is not None:
        return OutputSpec(0, *location)
    if count:
        return OutputSpec(count)
    return None


def _apply_parameters(request: InferRequest,
                      parameters: Mapping[str, service_pb2.InferParameter]) -> bool:
    """Set the request fields Triton reads from parameters; returns the empty-final switch."""
    empty_final = False
    for key, param in parameters.items():
        kind = param.WhichOneof("parameter_choice")
        if key == "sequence_id":
            if kind == "int64_param":
                request.correlation_id = param.int64_param
            elif kind == "string_param":
                request.correlation_id = param.string_param
            else:
                raise InvalidArgumentError(
                    "invalid value type for 'sequence_id' parameter, expected int64_param or "
                    "string_param."
                )
        elif key in ("sequence_start", "sequence_end"):
            if kind != "bool_param":
                raise InvalidArgumentError(
                    f"invalid value type for '{key}' parameter, expected bool_param."
                )
            setattr(request, key, param.bool_param)
        elif key == "priority":
            if kind == "int64_param":
                if param.int64_param < 0:
                    raise InvalidArgumentError(
                        "invalid value for 'priority', expected value >= 0."
                    )
                request.priority = param.int64_param
            elif kind == "uint64_param":
                request.priority = param.uint64_param
            else:
                raise InvalidArgumentError(
                    "invalid value type for 'priority' parameter, expected int64_param or "
                    "uint64_param."
                )
        elif key == "timeout":
            if kind != "int64_param":
                raise InvalidArgumentError(
                    "invalid value type for 'timeout' parameter, expected int64_param."
                )
            request.timeout_us = param.int64_param
        elif key.startswith("triton_"):
            if key not in RESERVED_PARAMETERS:
                raise InvalidArgumentError(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. Only "
                    "the following keys starting with 'triton_' are allowed: "
                    + " ".join(RESERVED_PARAMETERS)
                )
            if kind != "bool_param":
                raise InvalidArgumentError(
                    f"invalid value type for '{key}' parameter, expected bool_param."
                )
            empty_final = param.bool_param
        elif kind == "int64_param":
            request.parameters[key] = param.int64_param
        elif kind == "bool_param":
            request.parameters[key] = param.bool_param
        elif kind == "string_param":
            request.parameters[key] = param.string_param
        elif kind == "double_param":
            request.parameters[key] = param.double_param
        else:
            raise InvalidArgumentError(
                f"invalid value type for '{key}' parameter, expected int64_param, bool_param, "
                "or string_param."
            )
    return empty_final
