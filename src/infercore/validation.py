"""Checks an InferRequest against its model's config, with tables built once at load.

``RequestValidator`` is made per loaded model version from its (normalised) config; its
``validate`` runs on the caller's thread for every request, so all per-model work (the
input table, datatype lookups, output names, message fragments) happens in ``__init__``.

The checks, their order and their messages are those of Triton's core
(``InferenceRequest::Normalize`` and the input data checks after it), which clients
match on: the requested outputs, the input count, the batch dimension, each input's
datatype and shape, then each input's data size. Triton walks the inputs in the order of
its ``std::unordered_map`` (``triton_order``); a request that validates does not care, so
the checks run in the request's order and only a failing request is checked again in
Triton's, to name the input Triton names. Messages from the core carry Triton's
``[request id: <id>] `` label (``request_label``); the name lookups do not.

Frontends hand inputs whose data does not fit the shape and datatype they declare (a
size mismatch, a negative dimension, an unknown datatype, malformed BYTES data) as
``RawInput``: the validator refuses them at Triton's point, with Triton's message. The
body of a raw binary HTTP request (``request.raw_input``) becomes the model's one input
here, as Triton's core deduces it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import model_config_pb2

from .errors import InvalidArgumentError
from .request import InferRequest, request_label
from .tensor import DataType, RawInput, Tensor
from .triton_order import triton_order

__all__ = ["BackendRefusal", "InputSpec", "RawInput", "RequestValidator", "datatype_mismatch"]

_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full shape "
    "including the batch dim in your input dims config, try setting max_batch_size to zero. "
    "See the model configuration docs for more info on max_batch_size."
)
_UINT32 = 0xFFFFFFFF
_INT64 = 1 << 64


def dims_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def datatype_mismatch(label: str, name: str, got: str, model: str, want: str) -> str:
    """Triton's text for an input of another datatype than the model's (wire names)."""
    return (f"{label}inference input '{name}' data-type is '{got}', but model '{model}' "
            f"expects '{want}'")


def _int64(value: int) -> int:
    """``value`` as a wrapped signed 64-bit integer (Triton's int64_t arithmetic)."""
    value %= _INT64
    return value - _INT64 if value >= _INT64 >> 1 else value


def _int32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One configured input, as the validator needs it."""

    name: str
    data_type: DataType
    dims: tuple[int, ...]  # without the batch dimension
    reshape: tuple[int, ...] | None  # what the backend sees (without batch dim)
    optional: bool
    fixed: bool  # no -1 in dims


class BackendRefusal(InvalidArgumentError):
    """What Triton's core lets through and the model's backend refuses before executing
    (its statistics count the request as failed): refused here, at the same point of the
    request's life as far as a client sees."""


class RequestValidator:
    """Validates requests for one model version and puts inputs in the backend's shape."""

    def __init__(self, config: model_config_pb2.ModelConfig) -> None:
        self.model_name = config.name
        self._python = config.backend == "python"
        self.max_batch_size = int(config.max_batch_size)
        self.inputs: dict[str, InputSpec] = {}
        for inp in config.input:
            reshape = tuple(int(d) for d in inp.reshape.shape) if inp.HasField("reshape") else None
            dims = tuple(int(d) for d in inp.dims)
            self.inputs[inp.name] = InputSpec(
                name=inp.name,
                data_type=DataType.from_config(model_config_pb2.DataType.Name(inp.data_type)),
                dims=dims,
                reshape=reshape,
                optional=bool(inp.optional),
                fixed=all(d >= 0 for d in dims),
            )
        self.required = tuple(name for name, spec in self.inputs.items() if not spec.optional)
        self.output_names = frozenset(out.name for out in config.output)
        self._needs_reshape = any(spec.reshape is not None for spec in self.inputs.values())

    def validate(self, request: InferRequest) -> None:
        """Raise InvalidArgumentError unless ``request`` fits the model; set its batch size."""
        if request.raw_input is not None:
            self._take_raw_input(request)
        wanted = request.requested_outputs
        if wanted is not None:
            self._check_outputs(wanted)
        inputs = request.inputs
        try:
            batch_size = self._check_inputs(inputs, request.id)
        except InvalidArgumentError as first:
            if len(inputs) < 2:
                raise
            # Name what Triton names: check again in the order Triton walks the inputs.
            ordered = {name: inputs[name] for name in triton_order(inputs)}
            self._check_inputs(ordered, request.id)
            raise first from None  # not reached: the same checks fail in any order
        request.batch_size = batch_size
        if self._needs_reshape:
            self._apply_reshape(request)

    def _check_outputs(self, wanted: Sequence[str]) -> None:
        if len(set(wanted)) != len(wanted):
            # Current Triton refuses duplicate output names (core PR #493, in the words
            # its gRPC QA test reads); 2.51 merged them. HTTP refuses them earlier.
            seen: set[str] = set()
            for name in wanted:
                if name in seen:
                    raise InvalidArgumentError(f"output '{name}' already exists in request")
                seen.add(name)
        names = self.output_names
        unknown = [name for name in wanted if name not in names]
        if unknown:  # Triton keeps requested outputs in a std::set: the least name first
            raise InvalidArgumentError(
                f"unexpected inference output '{min(unknown)}' for model '{self.model_name}'")

    def _check_inputs(self, inputs: Mapping[str, Tensor], request_id: str) -> int:
        """Triton's checks of the inputs in the order of ``inputs``; the batch size."""
        specs = self.inputs
        model = self.model_name
        count = len(inputs)
        if count > len(specs) or count < len(self.required):
            raise InvalidArgumentError(self._count_message(inputs, request_id))
        batching = self.max_batch_size > 0
        batch = 0  # Triton's uint32_t batch_size_
        irregular = False  # batch 0, or a batch dim that is not the uint32 batch size
        if batching:
            for name, tensor in inputs.items():
                if name not in specs:
                    raise InvalidArgumentError(
                        f"unexpected inference input '{name}' for model '{model}'")
                shape = tensor.shape
                if not shape:
                    raise InvalidArgumentError(
                        f"{request_label(request_id)}input '{name}' has no shape but model "
                        f"requires batch dimension for '{model}'")
                if batch == 0:
                    batch = shape[0] & _UINT32
                elif shape[0] != batch:
                    raise InvalidArgumentError(
                        f"{request_label(request_id)}input '{name}' batch size does not "
                        f"match other inputs for '{model}'")
                if not 0 < shape[0] <= _UINT32:  # a batch dim the batch size may differ from
                    irregular = True
            if _int32(batch) > self.max_batch_size:
                raise InvalidArgumentError(
                    f"{request_label(request_id)}inference request batch-size must be <= "
                    f"{self.max_batch_size} for '{model}'")
            irregular = irregular or batch == 0
        raw = False
        for name, tensor in inputs.items():
            spec = specs.get(name)
            if spec is None:
                raise InvalidArgumentError(
                    f"unexpected inference input '{name}' for model '{model}'")
            if tensor.data_type is not spec.data_type:
                got = tensor.data_type.value if tensor.data_type is not None else "<invalid>"
                raise InvalidArgumentError(datatype_mismatch(
                    request_label(request_id), name, got, model, spec.data_type.value))
            shape = tensor.shape
            item = shape[1:] if batching else shape
            if not spec.fixed or item != spec.dims:  # fixed and equal: the common case
                self._check_dims(name, spec, item, shape, request_id)
            raw = raw or type(tensor) is RawInput
        if irregular or raw:
            for name, tensor in inputs.items():
                self._check_data(name, tensor, batch if batching else None, request_id)
        if not batching:
            return 1
        if not inputs and self._python:
            # Triton's Python backend reads the batch size from the first input
            raise BackendRefusal(
                f"{request_label(request_id)}out of bounds index 0: request has 0 inputs")
        if batch == 0:  # Triton would run such a request with no batch at all
            raise InvalidArgumentError(
                f"inference request batch-size must be >= 1 for '{model}'")
        return batch

    def _count_message(self, inputs: Mapping[str, Tensor], request_id: str) -> str:
        total = len(self.inputs)
        required = len(self.required)
        if total == required:
            expected = f"expected {total} inputs"
        else:
            expected = f"expected number of inputs between {required} and {total}"
        got = ",".join(f"'{name}'" for name in inputs)
        missing = [f"'{name}'" for name in self.required if name not in inputs]
        # Triton drops the last character of the list it built: the '[' when it is empty
        missing_text = "[" + ",".join(missing) + "]" if missing else "]"
        return (f"{request_label(request_id)}{expected} but got {len(inputs)} inputs for "
                f"model '{self.model_name}'. Got input(s) [{got}], but missing required "
                f"input(s) {missing_text}. Please provide all required input(s).")

    def _check_dims(self, name: str, spec: InputSpec, item: tuple[int, ...],
                    shape: tuple[int, ...], request_id: str) -> None:
        dims = spec.dims
        if len(item) == len(dims):
            for got, want in zip(item, dims, strict=True):
                if got == -1:
                    raise InvalidArgumentError(
                        f"{request_label(request_id)}All input dimensions should be "
                        f"specified for input '{name}' for model '{self.model_name}', got "
                        f"{dims_text(shape)}")
                if want != -1 and got != want:
                    break
            else:
                return
        batching = self.max_batch_size > 0
        expected = ((-1,) + dims) if batching else dims
        raise InvalidArgumentError(
            f"{request_label(request_id)}unexpected shape for input '{name}' for model "
            f"'{self.model_name}'. Expected {dims_text(expected)}, got {dims_text(shape)}. "
            + (_BATCH_NOTE if batching else ""))

    def _check_data(self, name: str, tensor: Tensor, batch: int | None,
                    request_id: str) -> None:
        """Triton's data checks of one input whose size its shape does not vouch for;
        ``batch`` is the request's batch size (None: the model does not batch)."""
        shape = tensor.shape
        if batch is not None:  # Triton's shape with the batch dim: none for batch 0
            shape = ((batch,) if batch else ()) + shape[1:]
        count = 1
        for dim in shape:
            count *= dim
        prefix = request_label(request_id)
        model = self.model_name
        raw = tensor if isinstance(tensor, RawInput) else None
        declared = 1  # what the input's own shape asks for, should Triton's sums fit
        for dim in tensor.shape:
            declared *= dim
        problem: str | None
        if tensor.data_type is DataType.BYTES:
            if raw is not None:
                data = raw.data if raw.data is not None else b""
                problem = (_bytes_problem(data, count, name, model, prefix)
                           or _bytes_problem(data, declared, name, model, prefix)
                           or f"{prefix}unexpected BYTES data for inference input '{name}' "
                              f"for model '{model}'")  # a RawInput is always refused
            else:
                problem = _bytes_count_problem(tensor.element_count, count, name, model,
                                               prefix)
            if problem is not None:
                raise InvalidArgumentError(problem)
            return
        size = tensor.data_type.byte_size
        expected = _int64(count * size)
        got = raw.byte_size if raw is not None else tensor.size
        if raw is not None and expected == got:
            expected = _int64(declared * size)
        if expected != got or raw is not None:  # a RawInput is always refused
            raise InvalidArgumentError(
                f"{prefix}input byte size mismatch for input '{name}' for model '{model}'. "
                f"Expected {expected}, got {got}")

    def _take_raw_input(self, request: InferRequest) -> None:
        """Make a raw request's body (Triton's "raw_input") the model's one input, its
        shape deduced as Triton's core deduces it: the configured dims after a batch
        dimension of 1, the one variable dimension from the body's size; a BYTES input
        must be of shape [1], its one element the whole body."""
        label = request_label(request.id)
        model = self.model_name
        if len(self.inputs) != 1:
            raise InvalidArgumentError(
                f"{label}Raw request must only have 1 input (found 1) to be deduced but got "
                f"{len(self.inputs)} inputs in '{model}' model configuration")
        spec = next(iter(self.inputs.values()))
        shape = [1] if self.max_batch_size > 0 else []
        variable = -1
        fixed = 1
        for dim in spec.dims:
            if dim == -1:
                if variable != -1:
                    raise InvalidArgumentError(
                        f"{label}The shape of the raw input '{spec.name}' can not be deduced "
                        "because there are more than one variable-sized dimension")
                variable = len(shape)
            else:
                fixed *= dim
            shape.append(dim)
        data = request.raw_input
        if spec.data_type is DataType.BYTES:
            if variable != -1 or fixed != 1:
                raise InvalidArgumentError(
                    f"{label}For BYTE datatype raw input '{spec.name}', the model must have "
                    "input shape [1]")
            element = np.empty(1, dtype=np.object_)
            element[0] = bytes(data)
            request.inputs = {spec.name: Tensor(DataType.BYTES, element.reshape(shape))}
            return
        size = spec.data_type.byte_size
        if variable != -1:
            shape[variable] = len(data) // fixed // size if fixed else 0
        count = 1
        for dim in shape:
            count *= dim
        if count * size != len(data):  # the one check left that the input could fail
            raise InvalidArgumentError(
                f"{label}input byte size mismatch for input 'raw_input' for model '{model}'. "
                f"Expected {count * size}, got {len(data)}")
        array = np.frombuffer(data, spec.data_type.numpy_dtype, count).reshape(shape)
        request.inputs = {spec.name: Tensor(spec.data_type, array)}

    def _apply_reshape(self, request: InferRequest) -> None:
        batching = self.max_batch_size > 0
        for name, tensor in list(request.inputs.items()):
            reshape = self.inputs[name].reshape
            if reshape is None:
                continue
            # numpy resolves a single -1 (variable) reshape dim from the element count
            target = ((tensor.shape[0],) + reshape) if batching else reshape
            request.inputs[name] = tensor.reshape(target)


def _bytes_problem(data: bytes | memoryview, count: int, name: str, model: str,
                   prefix: str) -> str | None:
    """What Triton says of BYTES data (each element a uint32 length, then its bytes)
    meant to hold ``count`` elements; None when it does."""
    view = memoryview(data).cast("B")
    total = len(view)
    offset = 0
    found = 0
    while offset < total:
        if found >= count:
            return (f"{prefix}unexpected number of string elements {found + 1} for inference "
                    f"input '{name}' for model '{model}', expecting {count}")
        if total - offset < 4:
            return (f"{prefix}incomplete string length indicator for inference input "
                    f"'{name}' for model '{model}', expecting 4 bytes but only "
                    f"{total - offset} bytes available. Please make sure the string length "
                    "indicator is in one buffer.")
        length = int.from_bytes(view[offset:offset + 4], "little")
        offset += 4
        if total - offset < length:
            return (f"incomplete string data for inference input '{name}', expecting string "
                    f"of length {length} but only {total - offset} bytes available")
        offset += length
        found += 1
    return _bytes_count_problem(found, count, name, model, prefix)


def _bytes_count_problem(found: int, count: int, name: str, model: str,
                         prefix: str) -> str | None:
    if found > count:
        return (f"{prefix}unexpected number of string elements {count + 1} for inference "
                f"input '{name}' for model '{model}', expecting {count}")
    if found < count:
        return (f"{prefix}expected {count} string elements for inference input '{name}' "
                f"for model '{model}', got {found}")
    return None
