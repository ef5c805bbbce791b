"""KServe v2 REST bodies for a client: binary-tensor infer requests and responses, and
Triton's generate schema for streaming.

Inference requests carry every input as binary data after the JSON header (Triton's
binary tensor extension, ``Inference-Header-Content-Length``) and ask for binary outputs,
so no tensor goes through JSON numbers. Outputs are read as views of the received body.

Generate (``generate_stream``) carries inputs and outputs as flat JSON values that the
server shapes from the model's metadata; ``generate_schema.generate_shape`` is that rule, so a
tensor whose shape that rule would not rebuild is refused before it is sent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from ..errors import InternalError, InvalidArgumentError, UnsupportedError
from ..generate_schema import generate_shape
from ..request import InferRequest, ParameterValue
from ..response import InferResponse
from ..tensor import DataType, Tensor
from .wire import (
    ModelInfo,
    check_parameters,
    tensor_from_buffer,
    tensor_from_values,
    tensor_to_bytes,
)

__all__ = ["decode_generate_event", "decode_infer", "encode_generate", "encode_infer"]

_RESPONSE_KEYS = ("id", "model_name", "model_version")


def encode_infer(request: InferRequest) -> tuple[bytes, int | None]:
    """The body of ``POST .../infer`` and the JSON header's length (None: no binary part)."""
    check_parameters(request.parameters)
    inputs = []
    binary: list[bytes] = []
    for name, tensor in request.inputs.items():
        data = tensor_to_bytes(name, tensor)
        inputs.append({"name": name, "shape": list(tensor.shape),
                       "datatype": tensor.data_type.value,
                       "parameters": {"binary_data_size": len(data)}})
        binary.append(data)
    parameters: dict[str, Any] = dict(request.parameters)
    correlation_id = request.correlation_id
    if correlation_id not in (0, ""):
        parameters["sequence_id"] = correlation_id
    if request.sequence_start:
        parameters["sequence_start"] = True
    if request.sequence_end:
        parameters["sequence_end"] = True
    if request.priority:
        parameters["priority"] = request.priority
    if request.timeout_us:
        parameters["timeout"] = request.timeout_us
    document: dict[str, Any] = {}
    if request.id:
        document["id"] = request.id
    document["inputs"] = inputs
    if request.requested_outputs is None:
        parameters["binary_data_output"] = True
    else:
        document["outputs"] = [{"name": name, "parameters": {"binary_data": True}}
                               for name in request.requested_outputs]
    if parameters:
        document["parameters"] = parameters
    header = orjson.dumps(document)
    if not binary:
        return header, None
    return b"".join((header, *binary)), len(header)


def decode_infer(body: bytes, header_length: int | None) -> InferResponse:
    """The InferResponse of a 200 answer to ``POST .../infer``."""
    size = len(body) if header_length is None else header_length
    try:
        document = orjson.loads(body[:size])
    except orjson.JSONDecodeError as exc:
        raise InternalError(f"failed to parse the inference response: {exc}") from None
    outputs: dict[str, Tensor] = {}
    offset = size
    for output in document.get("outputs") or ():
        name = str(output.get("name", ""))
        data_type = _data_type(name, output.get("datatype"))
        shape = [int(d) for d in output.get("shape") or ()]
        parameters = output.get("parameters") or {}
        binary_size = parameters.get("binary_data_size")
        if binary_size is not None:
            binary_size = int(binary_size)
            if offset + binary_size > len(body):
                raise InternalError(f"output '{name}' runs past the end of the response")
            outputs[name] = tensor_from_buffer(name, data_type, shape, body, offset,
                                               binary_size)
            offset += binary_size
        elif "data" in output:
            outputs[name] = tensor_from_values(name, data_type, shape, output["data"])
        else:
            raise UnsupportedError(f"output '{name}' came without data (shared memory "
                                   "outputs are not read by RemoteServer)")
    return InferResponse(str(document.get("model_name", "")),
                         _version(document.get("model_version")),
                         str(document.get("id", "")), outputs,
                         dict(document.get("parameters") or {}), None, True)


def _data_type(name: str, value: Any) -> DataType:
    try:
        return DataType.from_wire(str(value))
    except InvalidArgumentError:
        raise UnsupportedError(f"output '{name}' has datatype '{value}', which infercore "
                               "does not know") from None


def _version(value: Any) -> int:
    return int(value) if value not in (None, "") else -1


# -- generate schema ---------------------------------------------------------------------------

def encode_generate(request: InferRequest, info: ModelInfo) -> bytes:
    """The body of ``POST .../generate_stream``; UnsupportedError for what the generate
    schema cannot carry."""
    if (request.correlation_id not in (0, "") or request.sequence_start
            or request.sequence_end or request.priority or request.timeout_us):
        raise UnsupportedError(
            f"model '{request.model_name}' is decoupled: over HTTP its responses stream "
            "through Triton's generate_stream, which carries no correlation id, sequence "
            "flags, priority or timeout; use protocol='grpc'")
    check_parameters(request.parameters)
    document: dict[str, Any] = {}
    if request.id:
        document["id"] = request.id
    for name, tensor in request.inputs.items():
        spec = info.inputs.get(name)
        if spec is not None and generate_shape(spec.shape, tensor.element_count) != list(
                tensor.shape):
            raise UnsupportedError(
                f"input '{name}' of shape {list(tensor.shape)} cannot stream over HTTP: "
                "Triton's generate schema sends flat values, shaped from the model's "
                f"metadata {list(spec.shape)}; use protocol='grpc'")
        document[name] = _flat_values(name, tensor)
    if request.parameters:
        document["parameters"] = dict(request.parameters)
    return orjson.dumps(document)


def _flat_values(name: str, tensor: Tensor) -> list[Any]:
    array = tensor.to_numpy().reshape(-1)
    if tensor.data_type is DataType.BYTES:
        try:
            return [item.decode("utf-8") for item in array]
        except UnicodeDecodeError:
            raise UnsupportedError(
                f"input '{name}' holds bytes that are not UTF-8 text, which Triton's "
                "generate schema cannot carry; use protocol='grpc'") from None
    if tensor.data_type in (DataType.FP16, DataType.BF16):
        array = array.astype(np.float32)
    return array.tolist()


def decode_generate_event(document: dict[str, Any], info: ModelInfo) -> InferResponse:
    """One ``data:`` event of generate_stream (without an "error" key) as a response.

    Keys naming an output of the model are outputs (shaped from its metadata); the
    others, past id, model name and version, are the response's parameters.
    """
    outputs: dict[str, Tensor] = {}
    parameters: dict[str, ParameterValue] = {}
    for key, value in document.items():
        if key in _RESPONSE_KEYS:
            continue
        spec = info.outputs.get(key)
        if spec is None:
            if isinstance(value, (str, int, float)):
                parameters[key] = value
            continue
        count = len(value) if isinstance(value, list) else 1
        outputs[key] = tensor_from_values(key, spec.data_type,
                                          generate_shape(spec.shape, count), value)
    return InferResponse(str(document.get("model_name", info.name)),
                         _version(document.get("model_version")),
                         str(document.get("id", "")), outputs, parameters, None, False)
