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

``split_raw_contents`` takes a large serialized request's ``raw_input_contents`` out as
views over the received bytes before protobuf parses the rest: protobuf copies a bytes
field when it parses it and again each time it is read, three copies of a tensor that
may be refused anyway.

Pure functions: no state, no threads; the frontend calls them on the thread that decodes
the request. Error texts follow Triton's, since clients match on them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import service_pb2

from ...errors import InvalidArgumentError
from ...kserve.tensors import CONTENTS_FIELD, FIELD_TYPE, tensor_from_bytes
from ...request import InferRequest, request_label
from ...tensor import DataType, RawInput, Tensor, serialize_bytes_tensor
from ..shm import Regions

__all__ = ["DecodedRequest", "OutputSpec", "decode_request", "parse_version",
           "split_raw_contents"]

# The `triton_` request parameters Triton accepts (all others are reserved).
RESERVED_PARAMETERS = ("triton_enable_empty_final_response",)

_DATA_TYPES: dict[str, DataType] = {dt.value: dt for dt in DataType}
_NUMPY: dict[DataType, np.dtype] = {dt: dt.numpy_dtype for dt in DataType}

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


_RAW_INPUT_CONTENTS = 7  # ModelInferRequest's field number


def split_raw_contents(data: bytes, max_fields: int | None = None
                       ) -> tuple[bytes, list[memoryview]] | None:
    """A serialized ModelInferRequest without its ``raw_input_contents``, and views over
    ``data`` of those contents, in order; None when ``data`` is not a well-formed message
    (protobuf's parse of it then says why) or has more than ``max_fields`` top-level
    fields. The other fields keep their order."""
    view = memoryview(data)
    total = len(data)
    kept: list[memoryview] = []
    raw: list[memoryview] = []
    start = 0  # where the run of kept fields began
    offset = 0
    fields = 0
    while offset < total:
        fields += 1
        if max_fields is not None and fields > max_fields:
            return None
        field = offset
        key, offset = _varint(data, offset)
        wire = key & 7
        if wire == 2:  # length-delimited: every field the message declares
            length, offset = _varint(data, offset)
            end = offset + length
            if end > total:
                return None
            if key >> 3 == _RAW_INPUT_CONTENTS:
                kept.append(view[start:field])
                raw.append(view[offset:end])
                start = end
            offset = end
        elif wire == 0:
            _, offset = _varint(data, offset)
        elif wire == 1:
            offset += 8
        elif wire == 5:
            offset += 4
        else:  # groups, or not protobuf at all
            return None
        if offset < 0 or offset > total:
            return None
    kept.append(view[start:])
    return b"".join(kept), raw


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """The varint at ``offset`` and the offset after it (-1: truncated or too long)."""
    value = 0
    shift = 0
    total = len(data)
    while offset < total and shift < 64:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
    return 0, -1


# -- requests ------------------------------------------------------------------------------
def decode_request(
    msg: service_pb2.ModelInferRequest, shm: Regions,
    raw_contents: Sequence[bytes | memoryview] | None = None,
) -> DecodedRequest:
    """Build the engine request for ``msg``; raises InvalidArgumentError / NotFoundError.

    ``raw_contents``: the message's ``raw_input_contents`` when they were split off it
    (``split_raw_contents``).

    In Triton's order: the request parameters, the input names, each input's data, then
    the outputs' parameters. What the data says against its declared shape is left to the
    model's validation (inputs that do not fit become ``RawInput``), which checks it at
    Triton's point.
    """
    model = msg.model_name
    request = InferRequest(model, {}, model_version=parse_version(msg.model_version),
                           id=msg.id)
    empty_final = False
    if msg.parameters:
        empty_final = _apply_parameters(request, msg.parameters)
    inputs = msg.inputs
    if len(inputs) > 1:
        seen: set[str] = set()
        for io in inputs:
            if io.name in seen:
                raise InvalidArgumentError(
                    f"{request_label(msg.id)}input '{io.name}' already exists in request")
            seen.add(io.name)
    if msg.outputs:
        request.requested_outputs = tuple(out.name for out in msg.outputs)
    tensors = request.inputs
    raw = msg.raw_input_contents if raw_contents is None else raw_contents
    raw_count = len(raw)
    raw_index = 0
    for io in inputs:
        name = io.name
        data_type = _DATA_TYPES.get(io.datatype)  # None: Triton's '<invalid>'
        shape = tuple(io.shape)
        region = _shared_memory(io, shm) if io.parameters else None
        if region is not None:
            if io.HasField("contents"):
                raise InvalidArgumentError(
                    f"unexpected 'content' provided when using shared memory for input tensor "
                    f"'{name}' for model '{model}'"
                )
            tensor = tensor_from_bytes(data_type, shape, region)
        elif io.HasField("contents"):
            if raw_count:
                raise InvalidArgumentError(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model}'"
                )
            tensor = _from_contents(io.contents, data_type, shape, name, model)
        elif raw_index < raw_count:
            tensor = tensor_from_bytes(data_type, shape, raw[raw_index])
            raw_index += 1
        else:
            raise InvalidArgumentError(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        tensors[name] = tensor

    specs: dict[str, OutputSpec] | None = None
    for out in msg.outputs:
        if out.parameters:
            spec = _output_spec(out)
            if spec is not None:
                if specs is None:
                    specs = {}
                specs.setdefault(out.name, spec)
    return DecodedRequest(request, specs, empty_final)


def _fits(shape: tuple[int, ...]) -> bool:
    return not shape or min(shape) >= 0


def _from_contents(contents: service_pb2.InferTensorContents, data_type: DataType | None,
                   shape: tuple[int, ...], name: str, model: str) -> Tensor:
    """The typed ``contents`` of an input, as Triton's frontend accepts them."""
    fields = contents.ListFields()  # only the non-empty repeated fields
    values: list[object] = []
    if fields:
        if len(fields) > 1:
            raise InvalidArgumentError(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}', binary data was already supplied."
            )
        field, field_values = fields[0]
        carried = FIELD_TYPE[field.name]
        if data_type is None or CONTENTS_FIELD.get(data_type) != field.name:
            expected = data_type.value if data_type is not None else "<invalid>"
            raise InvalidArgumentError(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}' of type '{carried.value}', expected datatype '{expected}'"
            )
        values = list(field_values)
    if data_type is None:
        return RawInput(None, shape, 0)
    if not _fits(shape) or len(values) != math.prod(shape):
        if data_type is DataType.BYTES:
            data = serialize_bytes_tensor(values)
            return RawInput(data_type, shape, len(data), data)
        return RawInput(data_type, shape, len(values) * data_type.byte_size)
    if data_type is DataType.BYTES:
        array = np.empty(len(values), dtype=np.object_)
        array[:] = values
    elif data_type in (DataType.INT8, DataType.INT16):
        array = np.array(values, dtype=np.int32).astype(_NUMPY[data_type])
    elif data_type in (DataType.UINT8, DataType.UINT16):
        array = np.array(values, dtype=np.uint32).astype(_NUMPY[data_type])
    else:
        array = np.array(values, dtype=_NUMPY[data_type])
    return Tensor(data_type, array.reshape(shape))


def _shared_memory(
    tensor: service_pb2.ModelInferRequest.InferInputTensor, shm: Regions
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
