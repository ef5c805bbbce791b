"""KServe v2 REST inference requests (with Triton's extensions) -> InferRequest.

A request body is a JSON header, optionally followed by the binary tensor data of the
inputs that carry ``binary_data_size``, in input order; ``Inference-Header-Content-Length``
says where the JSON ends. Input data comes from one of three places, exactly one per
input: ``data`` (JSON, nested or flat), binary data after the header, or a registered
system shared memory region. Fixed-size binary and shared-memory inputs become numpy
views over the received body or the region: nothing is copied. Views over the body are
read-only (the body is an immutable ``bytes``).

Everything here runs on the frontend's event-loop thread; messages keep Triton's wording
because clients match on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ..errors import InternalError, InvalidArgumentError
from ..request import InferRequest
from ..tensor import DataType, Tensor, deserialize_bytes_tensor
from .http_header_cache import HeaderCache
from .http_params import RequestFields, is_uint
from .kserve import InputByteSizeError
from .shm import SharedMemoryRegion, SystemSharedMemory

__all__ = ["DecodedInfer", "OutputPlan", "decode_infer", "decode_raw_infer",
           "parse_header_length"]

_TYPES: dict[str, DataType] = {dt.value: dt for dt in DataType}
# numpy kinds a JSON list may hold for each target (ints widen to floats, never back).
_KINDS: dict[DataType, str] = {dt: ("b" if dt is DataType.BOOL else
                                    "iu" if dt.numpy_dtype.kind in "iu" else "iuf")
                               for dt in DataType if dt is not DataType.BYTES}
_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"


@dataclass(slots=True)
class OutputPlan:
    """How one requested output goes back: JSON, binary, shared memory, classification."""

    name: str
    binary: bool = False
    classification: int = 0
    shm: SharedMemoryRegion | None = None
    shm_offset: int = 0
    shm_byte_size: int = 0


@dataclass(slots=True)
class DecodedInfer:
    request: InferRequest
    outputs: dict[str, OutputPlan]  # the outputs the request named, in its order
    binary_default: bool  # how outputs it did not name are returned


def parse_header_length(value: bytes | None, body_length: int) -> int | None:
    """``Inference-Header-Content-Length`` as an int (None when absent), range-checked."""
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise InvalidArgumentError(
            "Unable to parse Inference-Header-Content-Length, got: "
            + value.decode("latin-1")) from None
    if length < 0 or length > body_length:
        raise InvalidArgumentError(
            f"inference header size should be in range (0, {body_length}), got: {length}")
    return length


def decode_infer(model: str, version: int, body: bytes, header_length: int | None,
                 shm: SystemSharedMemory, cache: HeaderCache | None = None) -> DecodedInfer:
    """Build the InferRequest of a JSON (+ binary) request body; raise TritonError if bad.

    With a ``cache``, a JSON header seen before is not parsed again (http_header_cache).
    """
    end = len(body) if header_length is None else header_length
    header = b""
    if cache is not None and header_length is not None:
        header = body[:end]
        plan = cache.get(header)
        if plan is not None:
            return DecodedInfer(plan.request(model, version, body, end), plan.outputs,
                                plan.binary_default)
    try:
        document = orjson.loads(memoryview(body)[:end])
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError(
            "failed to parse the request JSON buffer: the request must be a JSON object")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError(
            "Unable to parse 'id': attempt to access JSON non-string as string")
    fields = RequestFields()
    parameters = document.get("parameters")
    if parameters is not None:
        fields.read(parameters)
    try:
        inputs = _decode_inputs(model, document, body, end, shm)
    except InputByteSizeError as exc:
        raise exc.of_request(request_id) from None
    outputs = _decode_outputs(document.get("outputs"), shm)
    request = InferRequest(
        model, inputs, model_version=version, id=request_id,
        requested_outputs=list(outputs) if outputs else None,
        parameters=fields.parameters, priority=fields.priority, timeout_us=fields.timeout_us,
        correlation_id=fields.correlation_id, sequence_start=fields.sequence_start,
        sequence_end=fields.sequence_end)
    if header:
        cache.remember(header, document, request, fields, outputs,  # type: ignore[union-attr]
                       fields.binary_output)
    return DecodedInfer(request, outputs, fields.binary_output)


def decode_raw_infer(model: str, version: int, body: bytes,
                     metadata_inputs: Sequence[Mapping[str, Any]]) -> DecodedInfer:
    """Triton's raw binary request: the whole body is the data of a one-input model.

    The input's datatype comes from the model; its shape is the configured one with the
    single variable dimension (if any) deduced from the body size. Outputs go back binary.
    """
    if len(metadata_inputs) != 1:  # Triton core's text, labelled: a raw request has no id
        raise InvalidArgumentError(
            f"[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be "
            f"deduced but got "
            f"{len(metadata_inputs)} inputs in '{model}' model configuration")
    spec = metadata_inputs[0]
    name = str(spec["name"])
    data_type = _TYPES[str(spec["datatype"])]
    dims = [int(d) for d in spec["shape"]]
    if data_type is DataType.BYTES:
        array = deserialize_bytes_tensor(body)
        count = len(array)
    else:
        itemsize = data_type.byte_size
        if len(body) % itemsize:
            raise InvalidArgumentError(
                f"raw input of {len(body)} bytes is not a whole number of {data_type} "
                f"elements for model '{model}'")
        count = len(body) // itemsize
    shape = _deduce_shape(model, dims, count)
    if data_type is not DataType.BYTES:
        array = np.frombuffer(body, data_type.numpy_dtype, count)
    request = InferRequest(model, {name: Tensor(data_type, array.reshape(shape))},
                           model_version=version)
    return DecodedInfer(request, {}, True)


def _deduce_shape(model: str, dims: list[int], count: int) -> list[int]:
    variable = [i for i, d in enumerate(dims) if d < 0]
    fixed = int(np.prod([d for d in dims if d >= 0], dtype=np.int64))
    if not variable and fixed == count:
        return dims
    if len(variable) == 1 and fixed and count % fixed == 0:
        return [count // fixed if d < 0 else d for d in dims]
    raise InvalidArgumentError(
        f"unable to deduce the shape {dims} of the raw input of model '{model}' from "
        f"{count} elements")


def _decode_inputs(model: str, document: dict[str, Any], body: bytes, offset: int,
                   shm: SystemSharedMemory) -> dict[str, Tensor]:
    inputs_json = document.get("inputs")
    if inputs_json is None:
        raise InvalidArgumentError(
            "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'")
    if not isinstance(inputs_json, list):
        raise InvalidArgumentError(
            "Unable to parse 'inputs': attempt to access JSON non-array as array")
    tensors: dict[str, Tensor] = {}
    for item in inputs_json:
        if not isinstance(item, dict):
            raise InvalidArgumentError("Unable to parse 'inputs': expected JSON objects")
        name, data_type, shape = _input_header(item)
        if name in tensors:
            raise InvalidArgumentError(f"input '{name}' already exists in request")
        count = _element_count(shape)
        params = item.get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidArgumentError(f"Unable to parse 'parameters' of input '{name}'")
        has_data = "data" in item
        binary_size = params.get("binary_data_size")
        region = params.get("shared_memory_region")
        _check_one_source(has_data, binary_size is not None, region is not None)
        if binary_size is not None:
            if not is_uint(binary_size):
                raise InvalidArgumentError("Unable to parse 'binary_data_size'")
            if offset + binary_size > len(body):
                raise InvalidArgumentError(
                    f"unexpected size for input '{name}', expecting "
                    f"{offset + binary_size - len(body)} additional bytes for model '{model}'")
            array = _from_buffer(model, name, data_type, body, offset, binary_size, count)
            offset += binary_size
        elif region is not None:
            array = _from_shared_memory(model, name, data_type, params, count, shm)
        else:
            array = _from_json(name, data_type, item["data"], count)
        tensors[name] = Tensor(data_type, array.reshape(shape))
    if offset != len(body):
        raise InvalidArgumentError(f"unexpected additional input data for model '{model}'")
    return tensors


def _input_header(item: dict[str, Any]) -> tuple[str, DataType, list[int]]:
    name = item.get("name")
    if not isinstance(name, str):
        raise InvalidArgumentError("Unable to parse 'name'")
    datatype = item.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidArgumentError("Unable to parse 'datatype'")
    data_type = _TYPES.get(datatype)
    if data_type is None:
        raise InvalidArgumentError(f"invalid datatype for input {name}")
    shape = item.get("shape")
    if not isinstance(shape, list) or not all(is_uint(d) for d in shape):
        raise InvalidArgumentError(
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer")
    return name, data_type, shape


def _element_count(shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _check_one_source(has_data: bool, has_binary: bool, has_shm: bool) -> None:
    if has_data + has_binary + has_shm == 1:
        return
    message = ("Input must set only one of the following fields: 'data', 'binary_data_size' "
               "in 'parameters', 'shared_memory_region' in 'parameters'. But")
    if not (has_data or has_binary or has_shm):
        raise InvalidArgumentError(message + " no field is set")
    names = [n for n, on in (("'data'", has_data), ("'binary_data_size'", has_binary),
                             ("'shared_memory_region'", has_shm)) if on]
    raise InvalidArgumentError(message + " set " + " ".join(names))


def _from_buffer(model: str, name: str, data_type: DataType, buffer: Any, offset: int,
                 byte_size: int, count: int) -> np.ndarray:
    """A view of ``byte_size`` bytes at ``offset`` as ``count`` elements (BYTES: parsed)."""
    if data_type is DataType.BYTES:
        try:
            return deserialize_bytes_tensor(memoryview(buffer)[offset:offset + byte_size],
                                            count)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"unexpected BYTES data for input '{name}' for model '{model}': "
                f"{exc.message}") from None
    expected = count * data_type.byte_size
    if byte_size != expected:
        raise InputByteSizeError(name, data_type.value, model, expected, byte_size)
    return np.frombuffer(buffer, data_type.numpy_dtype, count, offset)


def _from_shared_memory(model: str, name: str, data_type: DataType, params: dict[str, Any],
                        count: int, shm: SystemSharedMemory) -> np.ndarray:
    region, offset, byte_size = _shared_memory_params(params)
    view = shm.region(region).view(offset, byte_size)
    return _from_buffer(model, name, data_type, view, 0, byte_size, count)


def _shared_memory_params(params: dict[str, Any]) -> tuple[str, int, int]:
    """(region, offset, byte_size) of a tensor placed in shared memory; a member of the
    wrong type is TritonJson's INTERNAL error, as Triton reads them."""
    region = params["shared_memory_region"]
    if not isinstance(region, str):
        raise InternalError("Unable to parse 'shared_memory_region': attempt to access JSON "
                            "non-string as string")
    offset = params.get("shared_memory_offset", 0)
    byte_size = params.get("shared_memory_byte_size", 0)
    for key, value in (("shared_memory_offset", offset), ("shared_memory_byte_size", byte_size)):
        if not is_uint(value):
            raise InternalError(f"Unable to parse '{key}': attempt to access JSON "
                                "non-unsigned-integer as unsigned-integer")
    return region, offset, byte_size


def _from_json(name: str, data_type: DataType, data: Any, count: int) -> np.ndarray:
    if not isinstance(data, list):
        raise InvalidArgumentError(
            "Unable to parse 'data': attempt to access JSON non-array as array")
    if data_type is DataType.BYTES:
        items = _flatten(data)
        if len(items) != count:
            raise InvalidArgumentError(_SHAPE_MISMATCH)
        out = np.empty(count, dtype=np.object_)
        try:
            out[:] = [item.encode("utf-8") for item in items]
        except AttributeError:
            raise InvalidArgumentError(
                "Unable to parse 'data': attempt to access JSON non-string as string"
            ) from None
        return out
    try:
        array = np.array(data)
    except ValueError:  # ragged nesting: Triton only counts the elements
        array = np.array(_flatten(data))
    if array.size != count:
        raise InvalidArgumentError(_SHAPE_MISMATCH)
    if array.dtype.kind in "fO" and _KINDS[data_type] == "iu":
        # numpy widens a list mixing uint64-only values with small ones to float64;
        # integers stay exact when converted to the target type directly.
        items = _flatten(data)
        if all(type(item) is int for item in items):
            try:
                return np.array(items, dtype=data_type.numpy_dtype)
            except OverflowError:
                raise InvalidArgumentError(
                    f"Unable to parse 'data': a value is out of range for input '{name}' "
                    f"of datatype {data_type}") from None
    if count and array.dtype.kind not in _KINDS[data_type]:
        expected = {"b": "boolean", "iu": "integer", "iuf": "number"}[_KINDS[data_type]]
        raise InvalidArgumentError(
            f"Unable to parse 'data': expected {expected} values for input '{name}' of "
            f"datatype {data_type}")
    return array.reshape(-1).astype(data_type.numpy_dtype, copy=False)


def _flatten(data: list[Any]) -> list[Any]:
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _decode_outputs(outputs_json: object, shm: SystemSharedMemory) -> dict[str, OutputPlan]:
    if outputs_json is None:
        return {}
    if not isinstance(outputs_json, list):
        raise InvalidArgumentError(
            "Unable to parse 'outputs': attempt to access JSON non-array as array")
    plans: dict[str, OutputPlan] = {}
    for item in outputs_json:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise InvalidArgumentError("Unable to parse 'name'")
        plans[name] = _output_plan(name, item.get("parameters") or {}, shm)
    return plans


def _output_plan(name: str, params: object, shm: SystemSharedMemory) -> OutputPlan:
    if not isinstance(params, dict):
        raise InvalidArgumentError(f"Unable to parse 'parameters' of output '{name}'")
    plan = OutputPlan(name)
    binary = params.get("binary_data", False)
    if not isinstance(binary, bool):
        raise InvalidArgumentError("Unable to parse 'binary_data'")
    classification = params.get("classification", 0)
    if not is_uint(classification):
        raise InvalidArgumentError("Unable to set 'classification'")
    region = params.get("shared_memory_region")
    if region is not None:
        if "classification" in params:
            raise InvalidArgumentError(
                "Output can't set both 'shared_memory_region' and 'classification'")
        if binary:
            raise InvalidArgumentError(
                "Output can't set both 'shared_memory_region' and 'binary_data'")
        region, plan.shm_offset, plan.shm_byte_size = _shared_memory_params(params)
        plan.shm = shm.region(region)
        plan.shm.view(plan.shm_offset, plan.shm_byte_size)  # bounds checked up front
    plan.binary = binary
    plan.classification = classification
    return plan
