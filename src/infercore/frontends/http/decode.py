"""KServe v2 REST inference requests (with Triton's extensions) -> InferRequest.

A request body is a JSON header, optionally followed by the binary tensor data of the
inputs that carry ``binary_data_size``, in input order; ``Inference-Header-Content-Length``
says where the JSON ends (0: the whole body is the data of the model's one input, a raw
request). Input data comes from one of three places, exactly one per input: ``data``
(JSON, nested or flat), binary data after the header, or a registered system shared
memory region. Fixed-size binary and shared-memory inputs become numpy views over the
received body or the region: nothing is copied. Views over the body are read-only (the
body is an immutable ``bytes``).

What Triton's HTTP frontend checks is checked here, in its order and with its texts (JSON
accessor failures are INTERNAL errors, see http_json). Data that does not fit its declared
shape (a binary size, a count of BYTES elements) is Triton's core's to report: the input
becomes a ``RawInput``, which the model's validator refuses in Triton's order.

Everything here runs on the frontend's event-loop thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
import orjson

from ...errors import InternalError, InvalidArgumentError
from ...kserve.tensors import tensor_from_bytes
from ...request import InferRequest, request_label
from ...tensor import DataType, RawInput, Tensor, serialize_bytes_tensor
from ..shm import Regions, SharedMemoryRegion
from .header_cache import HeaderCache
from .json import (
    as_bool,
    as_double,
    as_int,
    as_string,
    as_uint,
    member_as_array,
    member_as_string,
    parse_json,
    plain,
)
from .params import RequestFields

__all__ = ["DecodedInfer", "OutputPlan", "decode_infer", "parse_header_length", "raw_infer"]

_TYPES: dict[str, DataType] = {dt.value: dt for dt in DataType}
_ATOI = re.compile(rb"[ \t\n\v\f\r]*[+-]?[0-9]+")
_INT64 = 1 << 63
_MAX_DEPTH = 100  # nested arrays in 'data' (server PR #8172)
_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"
# how Triton reads a JSON value for each datatype, and the Python types that read so
_KIND: dict[DataType, str] = {
    dt: ("bool" if dt is DataType.BOOL else "uint" if dt.value.startswith("UINT")
         else "int" if dt.value.startswith("INT") else "float")
    for dt in DataType if dt is not DataType.BYTES}
_ACCEPTED: dict[str, set[type]] = {"bool": {bool}, "uint": {int}, "int": {int},
                                   "float": {int, float}}
_CHECKS = {"bool": as_bool, "uint": as_uint, "int": as_int, "float": as_double}


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
    """``Inference-Header-Content-Length`` read as Triton reads it (C ``atoi``: leading
    blanks and a sign, then digits, anything after ignored, no digits reads as 0), None
    when absent; out of the body's range is refused, quoting the header as sent."""
    if value is None:
        return None
    match = _ATOI.match(value)
    length = int(match.group(0)) if match else 0
    length = max(min(length, _INT64 - 1), -_INT64)  # strtol's long
    length = ((length + (1 << 31)) % (1 << 32)) - (1 << 31)  # the C int it lands in
    if length < 0 or length > body_length:
        raise InvalidArgumentError(
            f"inference header size should be in range (0, {body_length}), got: "
            + value.decode("latin-1"))
    return length


def raw_infer(model: str, version: int, body: bytes) -> DecodedInfer:
    """Triton's raw binary request: the whole body is the data of the model's one input
    (the model's validator deduces which, and its shape); outputs go back binary."""
    request = InferRequest(model, {}, model_version=version)
    request.raw_input = body
    return DecodedInfer(request, {}, True)


def decode_infer(model: str, version: int, body: bytes, header_length: int | None,
                 shm: Regions, cache: HeaderCache | None = None) -> DecodedInfer:
    """Build the InferRequest of a JSON (+ binary) request body; raise TritonError if bad.

    The fields are read in Triton's order (``id``, ``parameters``, ``inputs``, the data
    after the header, ``outputs``), each failure worded as Triton words it. With a
    ``cache``, a JSON header seen before is not parsed again (http_header_cache).
    """
    end = len(body) if header_length is None else header_length
    if end > len(body):  # a Content-Length longer than the chunked body that came
        raise InvalidArgumentError(
            f"unexpected size for request JSON, expecting {end - len(body)} more bytes")
    header = b""
    if cache is not None and header_length is not None:
        header = body[:end]
        plan = cache.get(header)
        if plan is not None:
            cached = plan.request(model, version, body, end)
            if cached is not None:  # None: the data does not fit; decode it in full
                return DecodedInfer(cached, plan.outputs, plan.binary_default)
    document = _document(memoryview(body)[:end])
    is_object = isinstance(document, dict)
    request_id = ""
    if is_object and "id" in document:
        request_id = as_string(document["id"], "Unable to parse 'id'")
    fields = RequestFields()
    if is_object and "parameters" in document:
        fields.read(document["parameters"])
    inputs = _decode_inputs(model, request_id, document, body, end, shm)
    names: list[str] = []
    outputs: dict[str, OutputPlan] = {}
    if is_object and "outputs" in document:
        names, outputs = _decode_outputs(
            member_as_array(document, "outputs", "Unable to parse 'outputs'"), shm)
    request = InferRequest(
        model, inputs, model_version=version, id=request_id,
        requested_outputs=names or None,
        parameters=fields.parameters, priority=fields.priority, timeout_us=fields.timeout_us,
        correlation_id=fields.correlation_id, sequence_start=fields.sequence_start,
        sequence_end=fields.sequence_end)
    if header and not any(type(t) is RawInput for t in inputs.values()):
        cache.remember(header, document, request, fields, outputs,  # type: ignore[union-attr]
                       fields.binary_output)
    return DecodedInfer(request, outputs, fields.binary_output)


def _document(header: memoryview) -> Any:
    """The JSON header: orjson reads well-formed ones fast; what it refuses is read as
    Triton reads it (``http_json``: NaN, rapidjson's errors). A key given twice keeps its
    last value with orjson, its first as Triton reads it."""
    try:
        return orjson.loads(header)
    except orjson.JSONDecodeError:
        return plain(parse_json(bytes(header)))


def _decode_inputs(model: str, request_id: str, document: Any, body: bytes, offset: int,
                   shm: Regions) -> dict[str, Tensor]:
    tensors: dict[str, Tensor] = {}
    for item in member_as_array(document, "inputs", "Unable to parse 'inputs'"):
        params = item.get("parameters") if isinstance(item, dict) else None
        if not isinstance(params, dict):
            params = {}  # Triton looks for its keys in an object only
        _check_one_source(isinstance(item, dict) and "data" in item,
                          "binary_data_size" in params, "shared_memory_region" in params)
        name = member_as_string(item, "name", "Unable to parse 'name'")
        datatype = member_as_string(item, "datatype", "Unable to parse 'datatype'")
        data_type = _TYPES.get(datatype)
        shape = [_int64(as_uint(dim, "Unable to parse 'shape'"))
                 for dim in member_as_array(item, "shape", "Unable to parse 'shape'")]
        if name in tensors:
            raise InvalidArgumentError(
                f"{request_label(request_id)}input '{name}' already exists in request")
        if "binary_data_size" in params:
            size = as_uint(params["binary_data_size"], "Unable to parse 'binary_data_size'")
            if offset + size > len(body):
                raise InvalidArgumentError(
                    f"unexpected size for input '{name}', expecting "
                    f"{offset + size - len(body)} additional bytes for model '{model}'")
            data = memoryview(body)[offset:offset + size]
            offset += size
            tensors[name] = tensor_from_bytes(data_type, shape, data, _element_count(shape))
        elif "shared_memory_region" in params:
            data = _shared_memory(params, shm)
            tensors[name] = tensor_from_bytes(data_type, shape, data, _element_count(shape))
        else:
            tensors[name] = _from_json(name, data_type, shape, item)
    if offset != len(body):
        raise InvalidArgumentError(f"unexpected additional input data for model '{model}'")
    return tensors


def _int64(dim: int) -> int:
    """A shape dimension as Triton stores it: the unsigned value in an int64."""
    return dim - (1 << 64) if dim >= 1 << 63 else dim


def _element_count(shape: list[int]) -> int:
    """Triton's element count of a shape: the int64 product, wrapping as C does."""
    count = 1
    for dim in shape:
        count = ((count * dim + (1 << 63)) % (1 << 64)) - (1 << 63)
    return count if shape else 0


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


def _shared_memory(params: dict[str, Any], shm: Regions) -> memoryview:
    region = as_string(params["shared_memory_region"], "Unable to parse 'shared_memory_region'")
    offset = as_uint(params.get("shared_memory_offset", 0),
                     "Unable to parse 'shared_memory_offset'")
    byte_size = as_uint(params.get("shared_memory_byte_size", 0),
                        "Unable to parse 'shared_memory_byte_size'")
    return shm.region(region).view(offset, byte_size)


def _from_json(name: str, data_type: DataType | None, shape: list[int], item: dict[str, Any]
               ) -> Tensor:
    """An input whose data is JSON ``data``, read as Triton's ``ReadDataFromJson``."""
    count = _element_count(shape)
    if count == 0:  # Triton reads no data then, whatever ``data`` holds
        if data_type is None:
            raise InvalidArgumentError(f"invalid datatype for input {name}")
        if prod(shape) == 0:
            dtype = np.object_ if data_type is DataType.BYTES else data_type.numpy_dtype
            return Tensor(data_type, np.empty(shape, dtype=dtype))
        return RawInput(data_type, shape, 0)  # a count that wrapped to 0
    data = member_as_array(item, "data", "Unable to parse 'data'")
    flat = _flatten(data, "" if data_type is DataType.BYTES else "Unable to parse 'data': ")
    if data_type is DataType.BYTES:
        values = _read_json_data(name, data_type, flat, len(flat))
        if len(flat) != count or count != prod(shape):  # Triton's core counts them
            serialized = serialize_bytes_tensor(values)
            return RawInput(data_type, shape, len(serialized), serialized)
        return Tensor(data_type, values.reshape(shape))
    if data_type is None:
        raise InvalidArgumentError(f"invalid datatype for input {name}")
    return Tensor(data_type, _read_json_data(name, data_type, flat, count).reshape(shape))


def _read_json_data(name: str, data_type: DataType, flat: list[Any], count: int
                   ) -> np.ndarray:
    """``count`` values of JSON ``data`` (its leaves, ``flat``) as a flat array of
    ``data_type``, read as Triton's ``ReadDataFromJson`` reads them: BYTES from strings
    only, FP16 and BF16 refused, a value of the wrong JSON kind or a count that is not
    ``count`` refused."""
    if data_type is DataType.BYTES:
        for value in flat:
            as_string(value, "Unable to parse JSON bytes array")
        array = np.empty(len(flat), dtype=np.object_)
        array[:] = [value.encode("utf-8", "surrogateescape") for value in flat]
        return array
    if data_type is DataType.FP16 or data_type is DataType.BF16:
        raise InvalidArgumentError(
            f"receiving {data_type} data via JSON is not supported. Please use the binary "
            f"data format for input {name}")
    return _numbers(data_type, flat, count)


def _numbers(data_type: DataType, flat: list[Any], count: int) -> np.ndarray:
    """``count`` JSON values as ``data_type``; Triton's errors for a value of the wrong kind
    and for a count that is not the shape's (whichever it meets first)."""
    kind = _KIND[data_type]
    if not flat and not count:
        return np.empty(0, dtype=data_type.numpy_dtype)
    # the count first: the kinds of millions of values that cannot fit are not gathered
    # (one long call, which would hold every other client up)
    if len(flat) == count and set(map(type, flat)) <= _ACCEPTED[kind]:
        if kind == "bool":
            return np.array(flat, dtype=np.bool_)
        if kind == "float":
            with np.errstate(over="ignore"):  # C's double -> float: inf, as in Triton
                return np.array(flat, dtype=np.float64).astype(data_type.numpy_dtype)
        low, high = min(flat), max(flat)
        if kind == "int" and -_INT64 <= low and high < _INT64:
            return np.array(flat, dtype=np.int64).astype(data_type.numpy_dtype)
        if kind == "uint" and low >= 0 and high < 2 * _INT64:
            return np.array(flat, dtype=np.uint64).astype(data_type.numpy_dtype)
    check = _CHECKS[kind]
    for index, value in enumerate(flat):
        if index >= count:
            raise InternalError(_SHAPE_MISMATCH)
        check(value, "Unable to parse 'data'")
    raise InternalError(_SHAPE_MISMATCH)


def _flatten(data: list[Any], context: str) -> list[Any]:
    """The leaves of nested ``data`` in order. Arrays nested more than _MAX_DEPTH deep are
    refused, as current Triton refuses them (2.51 read any depth, and a deep enough one
    exhausted its stack)."""
    if not any(type(item) is list for item in data):
        return data
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if type(item) is list:
                if len(stack) >= _MAX_DEPTH:
                    raise InvalidArgumentError(
                        f"{context}JSON nesting depth exceeds maximum allowed limit "
                        f"({_MAX_DEPTH})")
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _decode_outputs(outputs_json: list[Any], shm: Regions
                    ) -> tuple[list[str], dict[str, OutputPlan]]:
    """The requested output names, in order, and how each goes back."""
    names: list[str] = []
    plans: dict[str, OutputPlan] = {}
    for item in outputs_json:
        params = item.get("parameters") if isinstance(item, dict) else None
        if not isinstance(params, dict):
            params = {}
        if "shared_memory_region" in params:
            if "classification" in params:
                raise InvalidArgumentError(
                    "Output can't set both 'shared_memory_region' and 'classification'")
            if "binary_data" in params and as_bool(params["binary_data"],
                                                   "Unable to set 'binary_data'"):
                raise InvalidArgumentError(
                    "Output can't set both 'shared_memory_region' and 'binary_data'")
        name = member_as_string(item, "name", "Unable to parse 'name'")
        if name in plans:  # current Triton's HTTP frontend (2.51 merged the two)
            raise InvalidArgumentError(
                f"Duplicate output name '{name}' is not allowed in a request")
        names.append(name)
        plan = OutputPlan(name)
        if "classification" in params:
            plan.classification = as_uint(params["classification"],
                                          "Unable to set 'classification'")
        if "shared_memory_region" in params:
            plan.shm = shm.region(as_string(params["shared_memory_region"],
                                            "Unable to parse 'shared_memory_region'"))
            plan.shm_offset = as_uint(params.get("shared_memory_offset", 0),
                                      "Unable to parse 'shared_memory_offset'")
            plan.shm_byte_size = as_uint(params.get("shared_memory_byte_size", 0),
                                         "Unable to parse 'shared_memory_byte_size'")
            plan.shm.view(plan.shm_offset, plan.shm_byte_size)  # bounds checked up front
        elif "binary_data" in params:
            plan.binary = as_bool(params["binary_data"], "Unable to parse 'binary_data'")
        plans[name] = plan
    return names, plans
