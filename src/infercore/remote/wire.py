"""What both transports share: a model's wire facts, tensors to and from bytes, inputs.

``ModelInfo`` is read once per model version from its configuration (through the
transport) and cached by the RemoteServer: whether the model is decoupled (which decides
between a unary call and a stream), its inputs' datatypes (to convert lists and scalars
as the in-process API does) and its tensors' metadata shapes (to shape the flat values
of Triton's generate schema).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from ..errors import InternalError, InvalidArgumentError, UnsupportedError
from ..kserve.tensors import array_bytes, tensor_from_bytes
from ..request import ParameterValue
from ..tensor import DataType, RawInput, Tensor

__all__ = ["ModelInfo", "RESERVED_PARAMETERS", "check_parameters", "convert_inputs",
           "tensor_from_buffer", "tensor_from_values", "tensor_to_bytes"]

# Triton's reserved request parameters (its clients refuse them as custom parameters):
# the wire carries the request's own fields under these names.
RESERVED_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority",
                                 "timeout", "headers", "binary_data_output"})
_RESERVED_PREFIX = "triton_"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    data_type: DataType
    shape: tuple[int, ...]  # as model metadata reports it: batch dimension -1 included


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """The facts about one model version that requests to it need."""

    name: str
    decoupled: bool
    max_batch_size: int
    inputs: dict[str, TensorSpec] = field(default_factory=dict)
    outputs: dict[str, TensorSpec] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> ModelInfo:
        batch = (-1,) if config.max_batch_size > 0 else ()

        def specs(tensors: Any) -> dict[str, TensorSpec]:
            return {t.name: TensorSpec(
                DataType.from_config(model_config_pb2.DataType.Name(t.data_type)),
                batch + tuple(int(d) for d in t.dims)) for t in tensors}

        return cls(config.name, bool(config.model_transaction_policy.decoupled),
                   int(config.max_batch_size), specs(config.input), specs(config.output))


def check_parameters(parameters: Mapping[str, ParameterValue]) -> None:
    """Refuse what the wire cannot carry as a custom request parameter."""
    for key, value in parameters.items():
        if key in RESERVED_PARAMETERS or key.startswith(_RESERVED_PREFIX):
            raise InvalidArgumentError(
                f'Parameter "{key}" is a reserved parameter and cannot be specified.')
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise InvalidArgumentError(
                f"parameter '{key}' has invalid type {type(value).__name__}: it should be "
                "a string, an integer, a float or a boolean")


def tensor_to_bytes(name: str, tensor: Tensor) -> bytes:
    """A tensor's wire bytes: raw little-endian elements, BYTES length-prefixed."""
    try:
        array = tensor.to_numpy()
    except UnsupportedError as exc:
        raise UnsupportedError(f"input '{name}': {exc.message}; a remote server needs it "
                               "in CPU memory") from None
    return array_bytes(array, tensor.data_type)


def tensor_from_buffer(name: str, data_type: DataType, shape: Sequence[int],
                       buffer: bytes | memoryview, offset: int = 0,
                       size: int | None = None) -> Tensor:
    """An output from its wire bytes, without a copy (the array is read-only)."""
    view = memoryview(buffer)
    if offset or size is not None:
        view = view[offset:] if size is None else view[offset:offset + size]
    tensor = tensor_from_bytes(data_type, shape, view)
    if type(tensor) is RawInput:
        raise InvalidArgumentError(
            f"output '{name}' holds {len(view)} bytes, which are not the {data_type} data "
            f"of shape {list(shape)}")
    return tensor


def tensor_from_values(name: str, data_type: DataType, shape: Sequence[int] | None,
                       values: Any) -> Tensor:
    """An output given as JSON values (nested or flat lists, or a scalar)."""
    array: np.ndarray
    try:
        if data_type is DataType.BYTES:
            flat = np.asarray(values, dtype=np.object_).reshape(-1)
            array = np.empty(flat.size, dtype=np.object_)
            array[:] = [item.encode("utf-8") if isinstance(item, str) else bytes(item)
                        for item in flat]
        elif data_type is DataType.BF16:
            array = np.asarray(values, dtype=np.float32).astype(data_type.numpy_dtype)
        else:
            array = np.asarray(values, dtype=data_type.numpy_dtype)
        array = array.reshape(-1) if shape is None else array.reshape(shape)
    except (TypeError, ValueError) as exc:
        raise InternalError(f"output '{name}' of datatype {data_type} cannot be read from "
                            f"the response: {exc}") from None
    return Tensor(data_type, array)


def convert_inputs(values: Mapping[str, Any], info: ModelInfo) -> dict[str, Tensor]:
    """Lists and scalars as the in-process API converts them: to the configured datatype."""
    tensors: dict[str, Tensor] = {}
    for name, value in values.items():
        spec = info.inputs.get(name)
        data_type = spec.data_type if spec is not None else None
        try:
            if data_type is None or data_type is DataType.BYTES:
                tensors[name] = Tensor.from_object(value, data_type)
            else:
                tensors[name] = Tensor.from_numpy(
                    np.asarray(value, dtype=data_type.numpy_dtype), data_type)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"input '{name}' for model '{info.name}' cannot be converted to "
                f"{data_type}: {exc}") from exc
    return tensors
