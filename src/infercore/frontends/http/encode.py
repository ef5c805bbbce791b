"""InferResponse -> KServe v2 REST response body (JSON header + binary tensor data).

Each output goes back the way its request asked: as JSON ``data`` (the default), as
binary data after the JSON header (``binary_data`` / ``binary_data_output``), written
into a registered shared memory region (the response then carries only its name,
datatype and shape), or replaced by its top-k classes (``classification``). JSON data is
written as Triton writes it: floating-point values as doubles in rapidjson's notation
(NaN and Infinity included), FP16 and BF16 refused. Large binary
outputs are handed to the transport as views of the output arrays, not copies; small
ones (under 64 KiB) are copied, which costs less than setting up a view.

Runs on the frontend's event-loop thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from ...errors import InternalError, InvalidArgumentError
from ...response import InferResponse
from ...tensor import DataType, Tensor, serialize_bytes_tensor
from ..classification import classify
from .decode import DecodedInfer, OutputPlan
from .json import json_double

__all__ = ["ClassificationSource", "EncodedInfer", "encode_infer"]

# (output name) -> (labels, whether the model's outputs have a batch dimension)
ClassificationSource = Callable[[str], tuple[list[str], bool]]
Buffer = bytes | memoryview

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


class EncodedInfer:
    """The JSON header of an inference response and the binary buffers that follow it."""

    __slots__ = ("header", "binary")

    def __init__(self, header: bytes, binary: list[Buffer]) -> None:
        self.header = header
        self.binary = binary


def encode_infer(response: InferResponse, decoded: DecodedInfer,
                 classes: ClassificationSource) -> EncodedInfer:
    """Encode a successful response; raises TritonError when an output cannot be sent."""
    body: dict[str, Any] = {}
    if response.request_id:
        body["id"] = response.request_id
    body["model_name"] = response.model
    body["model_version"] = str(response.model_version)
    if response.parameters:
        body["parameters"] = response.parameters
    plans = decoded.outputs
    binary: list[Buffer] = []
    outputs = []
    for name, tensor in response.outputs.items():
        plan = plans.get(name)
        if plan is None:
            plan = OutputPlan(name, binary=decoded.binary_default)
        if plan.classification:
            labels, batched = classes(name)
            tensor = classify(tensor, plan.classification, labels, batched=batched)
        entry: dict[str, Any] = {"name": name, "datatype": tensor.data_type.value,
                                 "shape": list(tensor.shape)}
        if plan.shm is not None:
            _write_shared_memory(plan, tensor)
        elif plan.binary:
            data = _binary(tensor)
            entry["parameters"] = {"binary_data_size": len(data)}
            if len(data):
                binary.append(data)
        else:
            entry["data"] = _json_data(name, tensor)
        outputs.append(entry)
    body["outputs"] = outputs
    return EncodedInfer(orjson.dumps(body, option=_NUMPY), binary)


def _binary(tensor: Tensor) -> Buffer:
    array = tensor.to_numpy()
    if tensor.data_type is DataType.BYTES:
        return serialize_bytes_tensor(array)
    return _raw_bytes(array)


_COPY_BELOW = 64 * 1024  # bytes: a copy this small costs less than setting up a view


def _raw_bytes(array: np.ndarray) -> Buffer:
    """The array's bytes: a copy when small, else a view (when already contiguous).

    A uint8 view exports any fixed-size dtype, bool and bfloat16 included, as raw bytes.
    """
    if array.nbytes < _COPY_BELOW:
        return array.tobytes()
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def _json_data(name: str, tensor: Tensor) -> Any:
    array = tensor.to_numpy()
    data_type = tensor.data_type
    if data_type is DataType.BYTES:
        try:
            return [item.decode("utf-8") for item in array.reshape(-1)]
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                f"output '{name}' holds bytes that are not valid UTF-8 and cannot be sent "
                "as JSON; request it as binary data ('binary_data': true)") from None
    if data_type is DataType.FP16 or data_type is DataType.BF16:
        raise InvalidArgumentError(
            f"sending {data_type} data via JSON is not supported. Please use the binary data "
            "format for output")
    if data_type is DataType.FP32 or data_type is DataType.FP64:
        return _doubles(array)
    return np.ascontiguousarray(array).reshape(-1)


def _doubles(array: np.ndarray) -> Any:
    """Floating-point data as Triton writes it: each value as a double (an FP32 0.1 is
    0.10000000149011612), in rapidjson's notation. orjson writes the same where its
    notation agrees (finite, 1e-5 <= |x| < 1e16, or 0); elsewhere (NaN, Infinity,
    10000000000000000.0, 0.000001) each value is written as rapidjson writes it."""
    values = np.ascontiguousarray(array, dtype=np.float64).reshape(-1)
    magnitude = np.abs(values)
    if (magnitude < 1e16).all() and ((magnitude >= 1e-5) | (magnitude == 0)).all():
        return values  # NaN fails both tests
    return orjson.Fragment(b"[" + ",".join(map(json_double, values.tolist())).encode()
                           + b"]")


def _write_shared_memory(plan: OutputPlan, tensor: Tensor) -> None:
    array = tensor.to_numpy()
    data: Buffer
    if tensor.data_type is DataType.BYTES:
        data = serialize_bytes_tensor(array)
    else:
        data = _raw_bytes(array)
    if len(data) > plan.shm_byte_size:
        raise InternalError(
            f"shared memory size specified with the request for output '{plan.name}' "
            f"({plan.shm_byte_size} bytes) should be at least {len(data)} bytes to hold the "
            "results")
    assert plan.shm is not None
    plan.shm.view(plan.shm_offset, len(data))[:] = data
