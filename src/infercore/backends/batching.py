"""Batch assembly for framework backends: one framework call per payload.

A payload of a batching model may hold several requests (the dynamic batcher groups
requests whose inputs have the same shape past dim 0). Framework backends run it once:

    check_supported(config)      refuse at load what the framework backends do not do
    take_live(requests)          drop (and answer) the requests cancelled while queued
    concat_inputs(requests)      each input concatenated along dim 0, once (no copy for one
                                 request)
    split_rows(array, sizes)     an output cut back into per-request views (no copies)
    respond(requests, outputs)   one response per request with its rows of every output
    OutputShapes                 the response shape of outputs that have a config reshape
    request_outputs(requests)    the outputs any request asked for, to compute only those
    fail_requests(requests, e)   answer the still-open requests with (a copy of) an error

Threads: everything here runs on the thread executing the payload (an instance thread or
a caller running it inline); nothing is shared between calls, so nothing is locked.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError, TritonError, UnsupportedError
from ..request import InferRequest
from ..tensor import DataType, Tensor

__all__ = [
    "OutputShapes",
    "batch_sizes",
    "check_supported",
    "concat_inputs",
    "fail_requests",
    "request_outputs",
    "respond",
    "split_rows",
    "take_live",
]


def check_supported(config: model_config_pb2.ModelConfig, backend: str) -> None:
    """Refuse, at load, the config features the framework backends do not implement."""
    if config.batch_input or config.batch_output:
        raise UnsupportedError(
            f"model '{config.name}': batch_input and batch_output are not supported by "
            f"infercore's {backend} backend"
        )
    if config.sequence_batching.state:
        raise UnsupportedError(
            f"model '{config.name}': implicit state (sequence_batching.state) is not "
            f"supported by infercore's {backend} backend"
        )


def take_live(requests: Sequence[InferRequest]) -> list[InferRequest]:
    """The requests still wanted; cancelled ones are answered CancelledError here."""
    live = [request for request in requests if not request.cancelled]
    if len(live) != len(requests):
        for request in requests:
            if request.cancelled:
                request.sender.cancel_if_open()  # type: ignore[union-attr]
    return live


def batch_sizes(requests: Sequence[InferRequest]) -> list[int]:
    return [request.batch_size or 1 for request in requests]


def concat_inputs(requests: Sequence[InferRequest], model_name: str) -> dict[str, np.ndarray]:
    """Each input of the requests, concatenated along dim 0 (the batch dimension).

    Raises:
        InvalidArgumentError: the requests do not carry the same inputs, or their shapes
            past dim 0 differ (the batcher never forms such a payload).
    """
    first = requests[0].inputs
    if len(requests) == 1:
        return {name: tensor.to_numpy() for name, tensor in first.items()}
    names = tuple(first)
    for request in requests:
        if len(request.inputs) != len(names) or any(n not in request.inputs for n in names):
            raise InvalidArgumentError(
                f"requests batched together for model '{model_name}' carry different "
                f"inputs: {sorted(first)} and {sorted(request.inputs)}"
            )
    batched: dict[str, np.ndarray] = {}
    for name in names:
        arrays = [request.inputs[name].to_numpy() for request in requests]
        try:
            batched[name] = np.concatenate(arrays, axis=0)
        except ValueError as exc:
            shapes = ", ".join(str(list(a.shape)) for a in arrays)
            raise InvalidArgumentError(
                f"input '{name}' of the requests batched together for model '{model_name}' "
                f"have shapes that cannot be concatenated along the batch dimension: "
                f"{shapes}"
            ) from exc
    return batched


def split_rows(
    array: np.ndarray, sizes: Sequence[int], name: str, model_name: str
) -> list[np.ndarray]:
    """``array`` cut along dim 0 into one view per request, ``sizes[i]`` rows each."""
    if len(sizes) == 1:
        return [array]
    total = sum(sizes)
    if array.ndim == 0 or array.shape[0] != total:
        raise InvalidArgumentError(
            f"output '{name}' of model '{model_name}' has shape {list(array.shape)}, whose "
            f"first dimension should be the batch size {total}"
        )
    parts = []
    start = 0
    for size in sizes:
        parts.append(array[start:start + size])
        start += size
    return parts


def respond(
    requests: Sequence[InferRequest],
    arrays: Sequence[tuple[str, DataType, np.ndarray]],
    model_name: str,
) -> None:
    """Send each request its rows of every output (the sender drops unrequested ones)."""
    if len(requests) == 1:
        outputs = {name: Tensor(data_type, array) for name, data_type, array in arrays}
        requests[0].sender.send(outputs)  # type: ignore[union-attr]
        return
    sizes = batch_sizes(requests)
    per_request: list[dict[str, Tensor]] = [{} for _ in requests]
    for name, data_type, array in arrays:
        parts = split_rows(array, sizes, name, model_name)
        for outputs, part in zip(per_request, parts, strict=True):
            outputs[name] = Tensor(data_type, part)
    for request, outputs in zip(requests, per_request, strict=True):
        request.sender.send(outputs)  # type: ignore[union-attr]


class OutputShapes:
    """Outputs whose config has a ``reshape``: the model produces the reshape shape, the
    client gets ``dims`` (Triton's core reshapes them; here the backend does)."""

    __slots__ = ("_dims", "_batching")

    def __init__(self, config: model_config_pb2.ModelConfig) -> None:
        self._batching = config.max_batch_size > 0
        self._dims: dict[str, tuple[int, ...]] = {}
        for output in config.output:
            dims = tuple(int(d) for d in output.dims)
            # numpy resolves one -1; with more the shape is ambiguous, so it stays as is.
            if output.HasField("reshape") and sum(1 for d in dims if d < 0) <= 1:
                self._dims[output.name] = dims

    def __bool__(self) -> bool:
        return bool(self._dims)

    def apply(self, name: str, array: np.ndarray) -> np.ndarray:
        dims = self._dims.get(name)
        if dims is None:
            return array
        shape = ((array.shape[0] if array.ndim else 1,) + dims) if self._batching else dims
        try:
            return array.reshape(shape)
        except ValueError:
            return array  # the model's shape disagrees; the client sees what it produced


def fail_requests(requests: Sequence[InferRequest], error: TritonError) -> None:
    """Answer every still-open request with ``error`` (one copy per request, since each
    may be raised on a different consumer thread)."""
    for request in requests:
        sender = request.sender
        if sender is None or sender.closed:
            continue
        copy = type(error)(*error.args)
        copy.__cause__ = error.__cause__
        sender.send_error(copy)


def request_outputs(
    requests: Sequence[InferRequest], all_outputs: tuple[str, ...]
) -> tuple[str, ...]:
    """The outputs any of ``requests`` asked for, in config order (all when one asks none)."""
    wanted: set[str] = set()
    for request in requests:
        if request.requested_outputs is None:
            return all_outputs
        wanted.update(request.requested_outputs)
    return tuple(name for name in all_outputs if name in wanted)
