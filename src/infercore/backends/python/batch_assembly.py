"""Batch assembly for Python models: ``execute`` sees a whole batch as one request.

Beyond Triton, opt-in per model (``docs/python_batch_assembly.md``)::

    parameters: { key: "infercore.batch_assembly" value: { string_value: "concat" } }
    parameters: { key: "infercore.batch_padding" value: { string_value: "0" } }   # optional

    batch_assembly_from_config   the config's parameters -> BatchAssembly, checked at load
    execute_assembled            one payload: assemble -> model.execute(batch) -> split, send
    AssembledRequest             what ``execute`` receives
    AssemblyHost                 what it needs of the instance (backend.PythonInstance)

Assembly concatenates each input of the payload's requests along dim 0 (each request keeps
its own batch size), once per input; a one-request payload is handed over as is. Inputs
whose other dims differ across requests are padded to the largest extent of each dim when
the model configured a pad value for them, and fail the whole payload otherwise. The model
returns one response; each output is split back along dim 0 into views (no copies), one
slice per request, each request getting only the outputs it asked for.

Threads: everything here runs on the instance's backend thread, inside one ``execute``;
nothing is shared between executions, so nothing is locked.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import numpy as np
from tritonclient.grpc import model_config_pb2

from ...errors import InvalidArgumentError
from ...errors import TritonError as CoreTritonError
from ...request import InferRequest
from ...tensor import DataType, MemoryType
from ...tensor import Tensor as CoreTensor
from .pb_utils.error import TritonModelException, python_error_text
from .pb_utils.request import InferenceRequest, InferenceResponse
from .pb_utils.tensor import Tensor, _from_core, _to_core

if TYPE_CHECKING:
    from ...payload import Payload

__all__ = [
    "MODE_CONCAT",
    "MODE_NONE",
    "PARAM_ASSEMBLY",
    "PARAM_PADDING",
    "AssembledRequest",
    "AssemblyHost",
    "BatchAssembly",
    "batch_assembly_from_config",
    "execute_assembled",
]

PARAM_ASSEMBLY = "infercore.batch_assembly"
PARAM_PADDING = "infercore.batch_padding"  # every input; "infercore.batch_padding.<input>": one
MODE_CONCAT = "concat"
MODE_NONE = "none"
# Any other parameter under this prefix is a typo that would silently turn the feature off.
_PREFIX = "infercore.batch_"


# -- the policy, read at load -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BatchAssembly:
    """A model's batch assembly policy: which inputs may be padded, and with what."""

    model_name: str
    pad_values: Mapping[str, Any]  # input name -> numpy scalar (bytes for BYTES)
    output_names: tuple[str, ...]  # config order


def batch_assembly_from_config(
    config: model_config_pb2.ModelConfig, model_name: str
) -> BatchAssembly | None:
    """The model's batch assembly policy; None when it does not opt in.

    Raises:
        InvalidArgumentError: a parameter under ``infercore.batch_`` is unknown or its value
            is invalid, or the model cannot use batch assembly (no batch dimension,
            decoupled, a ragged-batch input without a pad value).
    """
    parameters = config.parameters
    keys = sorted(key for key in parameters if key.startswith(_PREFIX))
    if not keys:
        return None
    inputs = {tensor.name: tensor for tensor in config.input}
    mode: str | None = None
    default_pad: str | None = None
    input_pads: dict[str, str] = {}
    for key in keys:
        value = parameters[key].string_value
        if key == PARAM_ASSEMBLY:
            mode = value
        elif key == PARAM_PADDING:
            default_pad = value
        elif key.startswith(PARAM_PADDING + "."):
            input_name = key[len(PARAM_PADDING) + 1 :]
            if input_name not in inputs:
                _config_error(model_name, f"parameter '{key}' names no input of the model")
            input_pads[input_name] = value
        else:
            _config_error(
                model_name,
                f"unknown parameter '{key}'; batch assembly reads '{PARAM_ASSEMBLY}', "
                f"'{PARAM_PADDING}' and '{PARAM_PADDING}.<input name>'",
            )
    if mode is not None and mode not in (MODE_CONCAT, MODE_NONE):
        _config_error(
            model_name,
            f"parameter '{PARAM_ASSEMBLY}' must be '{MODE_CONCAT}' or '{MODE_NONE}', "
            f"not '{mode}'",
        )
    if mode != MODE_CONCAT:
        if default_pad is not None or input_pads:
            _config_error(
                model_name,
                f"'{PARAM_PADDING}' pads the inputs of assembled batches: it needs "
                f"'{PARAM_ASSEMBLY}' set to '{MODE_CONCAT}'",
            )
        return None
    if config.model_transaction_policy.decoupled:
        _config_error(
            model_name,
            f"'{PARAM_ASSEMBLY}' cannot be used by a decoupled model: one response is split "
            "across the batch, while a decoupled model answers each request on its own",
        )
    if config.max_batch_size <= 0:
        _config_error(
            model_name,
            f"'{PARAM_ASSEMBLY}' needs max_batch_size > 0, so that every input has a batch "
            "dimension to concatenate along",
        )
    pads: dict[str, Any] = {}
    for tensor in config.input:
        text = input_pads.get(tensor.name, default_pad)
        if text is None:
            if tensor.allow_ragged_batch:
                _config_error(
                    model_name,
                    f"input '{tensor.name}' sets allow_ragged_batch, so requests of different "
                    "shapes may share a batch; batch assembly needs a pad value for it "
                    f"('{PARAM_PADDING}' or '{PARAM_PADDING}.{tensor.name}')",
                )
            continue
        key = PARAM_PADDING + "." + tensor.name if tensor.name in input_pads else PARAM_PADDING
        try:
            data_type = DataType.from_config(model_config_pb2.DataType.Name(tensor.data_type))
            pads[tensor.name] = _parse_pad(text, data_type)
        except (ValueError, CoreTritonError):
            _config_error(
                model_name,
                f"pad value '{text}' of parameter '{key}' is not a valid "
                f"{model_config_pb2.DataType.Name(tensor.data_type)} value for input "
                f"'{tensor.name}'",
            )
    return BatchAssembly(
        model_name, MappingProxyType(pads), tuple(output.name for output in config.output)
    )


def _config_error(model_name: str, text: str) -> NoReturn:
    raise InvalidArgumentError(f"batch assembly of model '{model_name}': {text}")


def _parse_pad(text: str, data_type: DataType) -> Any:
    """``text`` as one element of ``data_type``; ValueError when it is not one."""
    if data_type is DataType.BYTES:
        return text.encode("utf-8")
    stripped = text.strip()
    if data_type is DataType.BOOL:
        lowered = stripped.lower()
        if lowered in ("true", "1"):
            return np.bool_(True)
        if lowered in ("false", "0"):
            return np.bool_(False)
        raise ValueError(text)
    dtype = data_type.numpy_dtype
    if dtype.kind in "iu":
        number = int(stripped)
        limits = np.iinfo(dtype)
        if not limits.min <= number <= limits.max:
            raise ValueError(text)
        return dtype.type(number)
    real = float(stripped)
    with np.errstate(over="ignore"):
        value = dtype.type(real)
    if math.isfinite(real) and not math.isfinite(float(value)):
        raise ValueError(text)  # out of the type's range (1e10 as FP16)
    return value


# -- what execute receives ----------------------------------------------------------------
class AssembledRequest:
    """The requests of one execution as one request: inputs concatenated along dim 0.

    ``inputs()`` and ``pb_utils.get_input_tensor_by_name`` read the batch; ``requests()``
    are the original requests (their own unpadded inputs, ids, parameters, senders), in
    the batch's order, and ``batch_slices()[i]`` is the rows of ``requests()[i]``.
    """

    __slots__ = (
        "_inputs",
        "_requests",
        "_batch_sizes",
        "_slices",
        "_total",
        "_padded",
        "_output_names",
        "_model_name",
    )

    def __init__(
        self,
        inputs: list[Tensor],
        requests: list[InferenceRequest],
        batch_sizes: list[int],
        padded: frozenset[str],
        output_names: Sequence[str],
        model_name: str,
    ) -> None:
        self._inputs = inputs
        self._requests = requests
        self._batch_sizes = batch_sizes
        slices = []
        start = 0
        for size in batch_sizes:
            slices.append(slice(start, start + size))
            start += size
        self._slices = slices
        self._total = start
        self._padded = padded
        self._output_names = output_names
        self._model_name = model_name

    # -- the batch -------------------------------------------------------------------------
    def inputs(self) -> list[Tensor]:
        """The batch's input tensors, each ``[batch_size(), ...]``."""
        return self._inputs

    def requests(self) -> list[InferenceRequest]:
        """The original requests, in batch order."""
        return self._requests

    def batch_sizes(self) -> list[int]:
        """Each request's batch size (its rows of the batch), in batch order."""
        return self._batch_sizes

    def batch_size(self) -> int:
        """The batch's total batch size: the dim 0 of every input and every output."""
        return self._total

    def batch_slices(self) -> list[slice]:
        """Each request's rows of the batch along dim 0, in batch order."""
        return self._slices

    def requested_output_names(self) -> list[str]:
        """The outputs any request of the batch asked for, in config order."""
        wanted: set[str] = set()
        for request in self._requests:
            wanted.update(request.requested_output_names())
        return [name for name in self._output_names if name in wanted]

    def is_cancelled(self) -> bool:
        """True when every request of the batch is cancelled (no one waits for the result)."""
        return all(request.is_cancelled() for request in self._requests)

    # -- padding -----------------------------------------------------------------------------
    def is_padded(self, name: str | None = None) -> bool:
        """Whether input ``name`` (any input, when None) was padded in this batch."""
        if name is None:
            return bool(self._padded)
        self._input_index(name)
        return name in self._padded

    def original_shapes(self, name: str) -> list[tuple[int, ...]]:
        """Each request's own shape of input ``name`` (batch dim included), in batch order."""
        self._input_index(name)
        shapes = []
        for request in self._requests:
            core = request._core
            assert core is not None  # requests of an execution always wrap an engine request
            shapes.append(tuple(core.inputs[name].shape))
        return shapes

    def item_shapes(self, name: str) -> np.ndarray:
        """Each row's unpadded shape of input ``name`` without the batch dim: int64
        ``[batch_size(), rank - 1]``. ``item_shapes("TOKENS")[:, 0]`` are sequence lengths."""
        shapes = self.original_shapes(name)
        rank = len(shapes[0]) - 1
        rows = np.empty((self._total, rank), dtype=np.int64)
        for shape, rows_of_request in zip(shapes, self._slices, strict=True):
            rows[rows_of_request] = shape[1:]
        return rows

    def _input_index(self, name: str) -> int:
        for index, tensor in enumerate(self._inputs):
            if tensor._name == name:
                return index
        raise TritonModelException(f"the assembled batch has no input named '{name}'")

    # -- what a batch has no single value of ---------------------------------------------
    def _per_request(self, method: str) -> NoReturn:
        raise TritonModelException(
            f"{method}() is not defined for an assembled batch of {len(self._requests)} "
            f"request(s) of model '{self._model_name}'; read it from each of requests()"
        )

    def request_id(self) -> NoReturn:
        self._per_request("request_id")

    def correlation_id(self) -> NoReturn:
        self._per_request("correlation_id")

    def flags(self) -> NoReturn:
        self._per_request("flags")

    def set_flags(self, flags: int) -> NoReturn:
        self._per_request("set_flags")

    def timeout(self) -> NoReturn:
        self._per_request("timeout")

    def parameters(self) -> NoReturn:
        self._per_request("parameters")

    def get_response_sender(self) -> NoReturn:
        self._per_request("get_response_sender")

    def set_release_flags(self, flags: int) -> NoReturn:
        self._per_request("set_release_flags")

    def __repr__(self) -> str:
        return (
            f"AssembledRequest(model={self._model_name!r}, requests={len(self._requests)}, "
            f"batch_size={self._total})"
        )


# -- assembly ------------------------------------------------------------------------------
class _BatchError(Exception):
    """The batch cannot be assembled or its response cannot be split: fails every request."""


def _describe(index: int, core: InferRequest) -> str:
    return f"request {index} (id '{core.id}')" if core.id else f"request {index}"


def _dims(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def assemble(
    policy: BatchAssembly, requests: list[InferenceRequest], cores: list[InferRequest]
) -> AssembledRequest:
    """One request-like object over ``requests`` (the wrappers of the engine's ``cores``);
    _BatchError when they do not fit together."""
    first = cores[0]
    names = list(first.inputs)
    batch_sizes: list[int] = []
    for index, core in enumerate(cores):
        if index and (len(core.inputs) != len(names) or any(n not in core.inputs for n in names)):
            missing = [n for n in names if n not in core.inputs]
            extra = [n for n in core.inputs if n not in first.inputs]
            name, where, other = (
                (missing[0], _describe(0, first), _describe(index, core))
                if missing
                else (extra[0], _describe(index, core), _describe(0, first))
            )
            raise _BatchError(
                f"input '{name}' is given by {where} but not by {other}; the requests of an "
                "assembled batch must give the same inputs"
            )
        size = None
        for name, tensor in core.inputs.items():
            shape = tensor.shape
            if not shape:
                raise _BatchError(
                    f"input '{name}' of {_describe(index, core)} has no batch dimension"
                )
            if size is None:
                size = shape[0]
            elif shape[0] != size:
                raise _BatchError(
                    f"the inputs of {_describe(index, core)} disagree on its batch size"
                )
        batch_sizes.append((core.batch_size or 1) if size is None else size)
    if len(requests) == 1:
        # Nothing to concatenate: the request's own tensors, shared.
        own = list(requests[0].inputs())
        return AssembledRequest(
            own, requests, batch_sizes, frozenset(), policy.output_names, policy.model_name
        )
    total = sum(batch_sizes)
    inputs: list[Tensor] = []
    padded: set[str] = set()
    for name in names:
        tensors = [core.inputs[name] for core in cores]
        data_type = tensors[0].data_type
        for index, tensor in enumerate(tensors):
            if tensor.memory_type is MemoryType.GPU:
                raise _BatchError(
                    f"input '{name}' of {_describe(index, cores[index])} is in GPU memory; "
                    "batch assembly concatenates CPU tensors only"
                )
            if tensor.data_type is not data_type:
                raise _BatchError(
                    f"input '{name}' is {data_type} in {_describe(0, first)} but "
                    f"{tensor.data_type} in {_describe(index, cores[index])}"
                )
        arrays = [tensor.to_numpy() for tensor in tensors]
        item = arrays[0].shape[1:]
        if all(array.shape[1:] == item for array in arrays):
            batch = np.concatenate(arrays, axis=0)
        else:
            batch = _pad(policy, name, arrays, cores, total)
            padded.add(name)
        inputs.append(_from_core(name, CoreTensor(data_type, batch)))
    return AssembledRequest(
        inputs, requests, batch_sizes, frozenset(padded), policy.output_names, policy.model_name
    )


def _pad(
    policy: BatchAssembly,
    name: str,
    arrays: list[np.ndarray],
    cores: list[InferRequest],
    total: int,
) -> np.ndarray:
    """The requests' ``arrays`` of input ``name`` in one batch padded to the largest extent
    of each dim; _BatchError when the input has no pad value or the ranks differ."""
    first = arrays[0].shape
    index = next(i for i, array in enumerate(arrays) if array.shape[1:] != first[1:])
    other = arrays[index].shape
    if name not in policy.pad_values:
        raise _BatchError(
            f"input '{name}' is {_dims(first)} in {_describe(0, cores[0])} and "
            f"{_dims(other)} in {_describe(index, cores[index])}: the requests of an "
            "assembled batch must agree on every dimension but the first, unless the model "
            f"sets a pad value ('{PARAM_PADDING}' or '{PARAM_PADDING}.{name}')"
        )
    rank = len(first)
    for index, array in enumerate(arrays):
        if array.ndim != rank:
            raise _BatchError(
                f"input '{name}' is {_dims(first)} in {_describe(0, cores[0])} and "
                f"{_dims(array.shape)} in {_describe(index, cores[index])}: padding needs "
                "the same number of dimensions"
            )
    extents = tuple(max(array.shape[axis] for array in arrays) for axis in range(1, rank))
    batch = np.full((total, *extents), policy.pad_values[name], dtype=arrays[0].dtype)
    start = 0
    for array in arrays:
        stop = start + array.shape[0]
        region = (slice(start, stop),) + tuple(slice(0, d) for d in array.shape[1:])
        batch[region] = array
        start = stop
    return batch


# -- execution ------------------------------------------------------------------------------
class AssemblyHost(Protocol):
    """What an assembled batch runs with: the instance of the model (``PythonInstance``),
    on its backend thread."""

    model_file: str  # the model's file, as "does not implement `execute`" names it

    def model_execute(self) -> Callable[[Any], Any] | None:
        """The model object's ``execute``; None when it has none."""

    def scope(self) -> AbstractContextManager[None]:
        """The model's scope, entered around ``execute`` and the sends."""

    def run_coroutine(self, coroutine: Any) -> Any:
        """Run an ``async def execute``'s coroutine to its end; its result."""

    def fail(self, request: InferenceRequest, text: str) -> None:
        """Fail one request with Triton's "Failed to process the request(s)" error."""

    def fail_all(self, requests: list[InferenceRequest], text: str) -> None:
        """Fail every request, likewise."""

    def send_returned(self, requests: list[InferenceRequest], result: Any) -> bool:
        """Answer each request from a list ``execute`` returned, one response each, as a
        model without batch assembly is answered; False when the result was refused."""


def execute_assembled(instance: AssemblyHost, policy: BatchAssembly, payload: Payload) -> None:
    """Run one payload through a batch-assembly model: every request gets an answer."""
    cores = payload.requests
    requests = [InferenceRequest._wrap(core, policy.output_names, False) for core in cores]
    try:
        batch = assemble(policy, requests, cores)
    except _BatchError as exc:
        payload.mark_compute_input_end()
        payload.mark_compute_output_start()
        instance.fail_all(requests, f"batch assembly: {exc}")
        return
    payload.mark_compute_input_end()
    with instance.scope():
        execute = instance.model_execute()
        if execute is None:
            payload.mark_compute_output_start()
            instance.fail_all(
                requests,
                f"Python model {instance.model_file} does not implement `execute` method.",
            )
            return
        try:
            result = execute(batch)
            if inspect.iscoroutine(result):
                result = instance.run_coroutine(result)
        except (Exception, SystemExit) as exc:
            payload.mark_compute_output_start()
            instance.fail_all(requests, python_error_text(exc))
            return
        payload.mark_compute_output_start()
        _send_result(instance, batch, requests, result)


def _send_result(
    instance: AssemblyHost,
    batch: AssembledRequest,
    requests: list[InferenceRequest],
    result: Any,
) -> None:
    """Answer each request from what ``execute`` returned for the assembled batch."""
    if isinstance(result, (list, tuple)):
        if len(result) == 1 and isinstance(result[0], InferenceResponse):
            result = result[0]
        elif len(result) == len(requests) and len(requests) > 1:
            # One response per original request: the model split the batch itself.
            instance.send_returned(requests, list(result))
            return
        else:
            instance.fail_all(
                requests,
                f"batch assembly: execute returned a list of {len(result)} item(s) for an "
                f"assembled batch of {len(requests)} request(s); return one "
                "InferenceResponse for the batch, or one per request of requests()",
            )
            return
    if result is None:
        # The model answered through requests()[i].get_response_sender(), or forgot to.
        for request in requests:
            sender = request._response_sender
            if sender is None or not sender._used:
                instance.fail(
                    request,
                    "batch assembly: execute returned None and sent no response for this "
                    "request; return one InferenceResponse for the assembled batch",
                )
        return
    if not isinstance(result, InferenceResponse):
        instance.fail_all(
            requests,
            "batch assembly: expected an 'InferenceResponse' object for the assembled batch "
            f"in the execute return, found type '{type(result)}'.",
        )
        return
    for request in requests:
        sender = request._response_sender
        if sender is not None and sender._used:
            instance.fail_all(
                requests,
                "Unable to send response. Non-decoupled model cannot send more than one "
                "response.",
            )
            return
    if result.has_error():
        for request in requests:
            core = request._core
            assert core is not None and core.sender is not None
            try:
                # One error object per request: each may be raised on a different thread.
                result._send(core.sender, final=True)
            except Exception as exc:  # noqa: BLE001 - e.g. cancelled meanwhile: this one only
                instance.fail(request, python_error_text(exc, skip_frames=0))
        return
    try:
        parts = _split(batch, result)
    except _BatchError as exc:
        instance.fail_all(requests, f"batch assembly: {exc}")
        return
    parameters = result._parameters or None
    for request, outputs in zip(requests, parts, strict=True):
        core = request._core
        assert core is not None and core.sender is not None
        try:
            core.sender.send(outputs, parameters=parameters, final=True)
        except Exception as exc:  # noqa: BLE001 - e.g. cancelled meanwhile: this one only
            instance.fail(request, python_error_text(exc, skip_frames=0))


def _split(batch: AssembledRequest, response: InferenceResponse) -> list[dict[str, CoreTensor]]:
    """Each request's outputs: views of the response's outputs along dim 0."""
    total = batch._total
    whole: list[tuple[str, Tensor, CoreTensor]] = []
    for tensor in response.output_tensors():
        core = _to_core(tensor)  # BYTES: str elements encoded once, for the whole batch
        shape = core.shape
        if not shape or shape[0] != total:
            raise _BatchError(
                f"output '{tensor._name}' has shape {_dims(shape)}, but its first dimension "
                f"must be the batch size {total} of the assembled batch (the requests' "
                f"batch sizes are {batch._batch_sizes}) to be split back per request"
            )
        whole.append((tensor._name, tensor, core))
    requests = batch._requests
    if len(requests) == 1:
        return [{name: core for name, _, core in whole}]
    parts: list[dict[str, CoreTensor]] = []
    for request, rows in zip(requests, batch._slices, strict=True):
        engine_request = request._core
        assert engine_request is not None
        outputs: dict[str, CoreTensor] = {}
        for name, tensor, core in whole:
            if engine_request.wants_output(name):
                outputs[name] = _rows(name, tensor, core, rows)
        parts.append(outputs)
    return parts


def _rows(name: str, tensor: Tensor, core: CoreTensor, rows: slice) -> CoreTensor:
    """Rows ``rows`` of an output, sharing its memory."""
    if core.memory_type is not MemoryType.GPU:
        return CoreTensor(core.data_type, core.to_numpy()[rows])
    producer = tensor._producer
    try:
        part = producer[rows]  # torch and cupy slice GPU tensors into views
    except Exception as exc:  # noqa: BLE001 - whatever the framework raises
        raise _BatchError(
            f"GPU output '{name}' cannot be split per request: slicing its "
            f"{type(producer).__name__} raised {type(exc).__name__}: {exc}"
        ) from exc
    return CoreTensor(core.data_type, part, MemoryType.GPU, core.memory_type_id)
