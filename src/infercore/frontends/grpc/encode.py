"""The engine's InferResponse -> KServe v2 gRPC ModelInferResponse.

Outputs always go back in ``raw_output_contents``, as Triton's gRPC frontend sends them;
an output written to shared memory keeps an empty entry there, and a classification
output becomes a BYTES tensor of "value:index[:label]" strings. ``encode_response`` fills
a protobuf message (any response); ``serialize_response`` writes the common response
(plain outputs, no parameters) straight to wire bytes, which costs half as much: its
tensor data is copied once, into the message's bytes (grpcio's send takes ``bytes``).

Pure functions and two bounded caches of encoded bytes; only the frontend's event-loop
thread calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import numpy as np
from tritonclient.grpc import service_pb2

from ...errors import InternalError, UnsupportedError
from ...kserve.params import to_infer_parameter
from ...kserve.tensors import array_bytes, wire_buffer
from ...response import InferResponse
from ...tensor import DataType
from ..classification import classify
from ..shm import SystemSharedMemory
from .codec import OutputSpec

__all__ = ["LabelsFor", "encode_response", "serialize_response"]

LabelsFor = Callable[[str], tuple[list[str], bool]]
"""Given an output name: its classification labels and whether the model batches."""


def encode_response(
    response: InferResponse,
    out: service_pb2.ModelInferResponse,
    specs: Mapping[str, OutputSpec] | None = None,
    shm: SystemSharedMemory | None = None,
    labels_for: LabelsFor | None = None,
) -> None:
    """Fill ``out`` (an empty ModelInferResponse) from a successful ``response``.

    ``specs`` names outputs to classify (``labels_for`` gives their labels) or to write
    into shared memory (regions resolved through ``shm``).
    """
    out.model_name = response.model
    out.model_version = str(response.model_version)
    out.id = response.request_id
    if response.parameters:
        parameters = out.parameters
        for key, value in response.parameters.items():
            to_infer_parameter(value, parameters[key])
    outputs = out.outputs
    raws = out.raw_output_contents
    for name, tensor in response.outputs.items():
        spec = specs.get(name) if specs else None
        if spec is not None and spec.classification:
            labels, batched = labels_for(name) if labels_for is not None else ([], False)
            tensor = classify(tensor, spec.classification, labels, batched=batched)
        array = tensor.to_numpy()
        data_type = tensor.data_type
        outputs.add(name=name, datatype=data_type.value, shape=array.shape)
        data = array_bytes(array, data_type)
        if spec is not None and spec.region:
            _write_shared_memory(name, data, spec, shm)
            raws.append(b"")
        else:
            raws.append(data)


def _write_shared_memory(name: str, data: bytes, spec: OutputSpec,
                         shm: SystemSharedMemory | None) -> None:
    if shm is None:
        raise UnsupportedError("shared memory outputs need a shared memory registry")
    if len(data) > spec.byte_size:
        raise InternalError(
            f"shared memory size specified with the request for output '{name}' "
            f"({spec.byte_size} bytes) should be at least {len(data)} bytes to hold the "
            "results"
        )
    view = shm.region(spec.region).view(spec.offset, spec.byte_size)
    view[: len(data)] = data


# -- the serialized form of common responses -----------------------------------------------
# A response with plain outputs and no parameters (the common case) is written straight to
# the protobuf wire format: its model name and version, and each output's name, datatype
# and shape, are the same from one request to the next, so their encoded bytes are kept
# and only the request id and the tensor bytes are new. The bytes equal what
# ModelInferResponse.SerializeToString() produces for the same message.
_PREFIXES: dict[tuple[str, int], bytes] = {}
_OUTPUT_HEADERS: dict[tuple[str, DataType, tuple[int, ...]], bytes] = {}
_CACHE_LIMIT = 4096  # entries per table; cleared when full (shapes may vary per request)
_VARINT = [bytes([n]) for n in range(128)]


def _varint(value: int) -> bytes:
    if value < 128:
        return _VARINT[value]
    out = bytearray()
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _prefix(model: str, version: int) -> bytes:
    """Fields 1 and 2 (model_name, model_version) of a ModelInferResponse."""
    key = (model, version)
    prefix = _PREFIXES.get(key)
    if prefix is None:
        text = str(version)
        prefix = (_field(b"\x0a", model.encode()) if model else b"") + (
            _field(b"\x12", text.encode()))
        if len(_PREFIXES) >= _CACHE_LIMIT:
            _PREFIXES.clear()
        _PREFIXES[key] = prefix
    return prefix


def _output_header(name: str, data_type: DataType, shape: tuple[int, ...]) -> bytes:
    """Field 5 (one InferOutputTensor: name, datatype, packed shape) of a response."""
    key = (name, data_type, shape)
    header = _OUTPUT_HEADERS.get(key)
    if header is None:
        body = _field(b"\x0a", name.encode()) if name else b""
        body += _field(b"\x12", data_type.value.encode())
        if shape:
            body += _field(b"\x1a", b"".join(_varint(dim) for dim in shape))
        header = _field(b"\x2a", body)
        if len(_OUTPUT_HEADERS) >= _CACHE_LIMIT:
            _OUTPUT_HEADERS.clear()
        _OUTPUT_HEADERS[key] = header
    return header


def serialize_response(response: InferResponse) -> bytes | None:
    """The serialized ModelInferResponse for ``response``, or None when it has parameters
    (then ``encode_response`` builds the message)."""
    if response.parameters:
        return None
    parts: list[bytes | np.ndarray] = [_prefix(response.model, response.model_version)]
    if response.request_id:
        parts.append(_field(b"\x1a", response.request_id.encode()))
    raws: list[bytes | np.ndarray] = []
    for name, tensor in response.outputs.items():
        array = tensor.to_numpy()
        data_type = tensor.data_type
        parts.append(_output_header(name, data_type, array.shape))
        data, size = wire_buffer(array, data_type)  # copied once, by the join below
        raws.append(b"\x32" + _varint(size))
        raws.append(data)
    parts += raws
    # an array is a buffer (C-contiguous, wire_buffer), which numpy's stubs do not declare
    return b"".join(cast("list[bytes]", parts))
