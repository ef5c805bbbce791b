"""What travels between the server and an instance's Ray actor: requests out, responses back.

    encode_requests(requests, store)   the payload's requests -> RemoteRequest values
    decode_requests(remote, fetch, ..) RemoteRequest values -> InferRequests (in the actor)
    RemoteResult                       each request's responses, and the execution's phases
    deliver(requests, result)          the responses -> each request's ResponseSender

Arrays cross as numpy arrays. A large one is stored once in Ray's object store (``store``
puts it and returns a reference) and read there by the actor without a copy (``fetch``
resolves the references in one call; the arrays it gives are read-only views of shared
memory when the actor runs on the same node). Small ones travel inside the call itself.
Responses come back the same way: Ray stores a large result once and the server reads its
arrays in place. This module never imports Ray: ``store`` and ``fetch`` are handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import TritonError, error_from_code
from ...request import InferRequest, ParameterValue
from ...tensor import DataType, Tensor

__all__ = [
    "STORE_MIN_BYTES",
    "RemoteError",
    "RemoteRequest",
    "RemoteResponse",
    "RemoteResult",
    "Stored",
    "decode_requests",
    "deliver",
    "encode_requests",
    "encode_response",
]

# Below this size an array rides inside the call (Ray inlines small arguments anyway).
STORE_MIN_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Stored:
    """An array left in Ray's object store: the reference to fetch it by."""

    ref: Any


@dataclass(frozen=True, slots=True)
class RemoteRequest:
    """One request as the actor needs it: what backends read from an InferRequest."""

    id: str
    inputs: tuple[tuple[str, str, Any], ...]  # (name, datatype, array or Stored)
    requested_outputs: tuple[str, ...] | None
    parameters: Mapping[str, ParameterValue]
    correlation_id: int | str
    sequence_start: bool
    sequence_end: bool
    batch_size: int
    priority: int
    timeout_us: int
    cancelled: bool


@dataclass(frozen=True, slots=True)
class RemoteError:
    code: int
    message: str

    def to_error(self) -> TritonError:
        return error_from_code(self.code, self.message)


@dataclass(frozen=True, slots=True)
class RemoteResponse:
    outputs: tuple[tuple[str, str, np.ndarray], ...]  # (name, datatype, array)
    parameters: Mapping[str, ParameterValue] | None
    error: RemoteError | None
    final: bool
    bare: bool = False  # the final flag alone (no response), as sender.close() sends it


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """The responses of each request (in payload order) and the actor's phase durations."""

    responses: tuple[tuple[RemoteResponse, ...], ...]
    input_ns: int  # actor start -> compute input end
    infer_ns: int  # compute input end -> compute output start
    output_ns: int  # compute output start -> actor end


def encode_requests(
    requests: Sequence[InferRequest], store: Callable[[np.ndarray], Any]
) -> list[RemoteRequest]:
    """The payload's requests, with each large numeric input put in the object store."""
    encoded = []
    for request in requests:
        inputs = []
        for name, tensor in request.inputs.items():
            array = tensor.to_numpy()
            value: Any = array
            if array.nbytes >= STORE_MIN_BYTES and array.dtype != np.object_:
                value = Stored(store(array))
            inputs.append((name, tensor.data_type.value, value))
        encoded.append(RemoteRequest(
            id=request.id,
            inputs=tuple(inputs),
            requested_outputs=request.requested_outputs,
            parameters=dict(request.parameters),
            correlation_id=request.correlation_id,
            sequence_start=request.sequence_start,
            sequence_end=request.sequence_end,
            batch_size=request.batch_size,
            priority=request.priority,
            timeout_us=request.timeout_us,
            cancelled=request.cancelled,
        ))
    return encoded


def decode_requests(
    remote: Sequence[RemoteRequest],
    fetch: Callable[[list[Any]], list[np.ndarray]],
    model_name: str,
    model_version: int,
) -> list[InferRequest]:
    """InferRequests for the actor's backend (their senders are set by the caller)."""
    refs = [value.ref for r in remote for _, _, value in r.inputs if isinstance(value, Stored)]
    fetched = iter(fetch(refs) if refs else ())
    requests = []
    for r in remote:
        inputs = {}
        for name, datatype, value in r.inputs:
            array = next(fetched) if isinstance(value, Stored) else value
            inputs[name] = Tensor(DataType(datatype), array)
        request = InferRequest(
            model_name, inputs, model_version=model_version, id=r.id,
            requested_outputs=r.requested_outputs, parameters=r.parameters,
            priority=r.priority, timeout_us=r.timeout_us, correlation_id=r.correlation_id,
            sequence_start=r.sequence_start, sequence_end=r.sequence_end)
        request.batch_size = r.batch_size
        request.cancelled = r.cancelled
        requests.append(request)
    return requests


def encode_response(
    outputs: Mapping[str, Tensor] | None,
    parameters: Mapping[str, ParameterValue] | None,
    error: TritonError | None,
    final: bool,
) -> RemoteResponse:
    return RemoteResponse(
        outputs=tuple((name, tensor.data_type.value, tensor.to_numpy())
                      for name, tensor in (outputs or {}).items()),
        parameters=dict(parameters) if parameters else None,
        error=None if error is None else RemoteError(int(error.code), error.message),
        final=final,
    )


def deliver(requests: Sequence[InferRequest], result: RemoteResult) -> None:
    """Send each request's responses through its sender, as a local backend would."""
    for request, responses in zip(requests, result.responses, strict=True):
        sender = request.sender
        if sender is None:
            continue
        for response in responses:
            if sender.closed:
                break
            if response.bare:
                sender.close()
                continue
            sender.send(
                {name: Tensor(DataType(datatype), array)
                 for name, datatype, array in response.outputs},
                parameters=response.parameters,
                error=None if response.error is None else response.error.to_error(),
                final=response.final,
            )
