"""pb_utils requests, responses, response senders, and BLS (requests a model sends itself).

Threads: ``execute`` runs on the instance's backend thread; a decoupled model may keep a
request's ``InferenceResponseSender`` and send from any thread it starts. Each sender's
``_lock`` guards its ``_closed``/``_sent`` state and orders its sends, so a model thread and
the backend thread (failing a request after ``execute`` raised) never both finish it.

The model a call belongs to (for ``Logger``, BLS and ``get_model_dir``) is a ``_Scope`` in a
context variable the backend sets around ``initialize``/``execute``/``finalize``; threads a
model starts do not inherit it, so ``current_scope`` also looks for the model's module on the
caller's stack.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import json
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from ....errors import NotFoundError
from ....errors import TritonError as CoreTritonError
from ....request import NO_TRACE, InferRequest, ParameterValue, TraceHandle
from ....response import InferResponse, ResponseSender, ResponseStream
from ..pb_json import triton_json
from .args import as_int, as_list, as_str, refused
from .error import TritonError, TritonModelException
from .tensor import Tensor, _from_core, _to_core

if TYPE_CHECKING:
    from collections.abc import Generator

    from ...base import ModelControl

__all__ = [
    "InferenceRequest",
    "InferenceTrace",
    "InferenceResponse",
    "InferenceResponseSender",
    "PreferredMemory",
    "ResponseIterator",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class _MemoryType(enum.IntEnum):
    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = _MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = _MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """Where a BLS request would like its outputs. A hint: infercore returns them where the
    called model produced them."""

    __slots__ = ("preferred_memory_type", "preferred_device_id")

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = _MemoryType(preferred_memory_type)
        self.preferred_device_id = int(preferred_device_id)


# -- the model a call belongs to ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Scope:
    model_name: str
    model_version: int
    version_dir: Path
    instance_name: str = ""
    infer: Callable[[InferRequest], ResponseStream] | None = None
    control: ModelControl | None = None  # the server's (pb_utils/control.py)


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "infercore_python_model", default=None
)
# top-level package of a loaded model module -> its model's scope
_SCOPES_BY_PACKAGE: dict[str, _Scope] = {}


def current_scope() -> _Scope | None:
    """The scope set by the backend, else the one of the nearest model module on the stack."""
    scope = _SCOPE.get()
    if scope is not None or not _SCOPES_BY_PACKAGE:
        return scope
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        # a model's modules all have its package (their __name__ is Triton's: "utils")
        package = str(frame.f_globals.get("__package__") or "").partition(".")[0]
        scope = _SCOPES_BY_PACKAGE.get(package)
        if scope is not None:
            return scope
        frame = frame.f_back
    return None


@contextmanager
def use_scope(scope: _Scope) -> Generator[None, None, None]:
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def register_package(package: str, scope: _Scope) -> None:
    _SCOPES_BY_PACKAGE[package] = scope


def unregister_package(package: str) -> None:
    _SCOPES_BY_PACKAGE.pop(package, None)


# -- parameters ----------------------------------------------------------------------------
def _parameters_dict(parameters: Any) -> dict[str, ParameterValue]:
    """Check a pb_utils parameters argument (str keys; bool/int/str values) and copy it."""
    if parameters is None:
        return {}
    if not isinstance(parameters, Mapping):
        raise TritonModelException(
            f"Expect parameters to be a dict, got {type(parameters)}"
        )
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)


# -- responses -----------------------------------------------------------------------------
class InferenceResponse:
    """A model's answer to one request: output tensors, or an error."""

    __slots__ = ("_output_tensors", "_error", "_parameters")

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: Mapping[str, bool | int | str] | None = None,
    ) -> None:
        # TypeError, as Triton's pybind constructor raises for arguments of the wrong type
        # (None included: only the argument left out means no outputs)
        output_tensors = as_list(output_tensors, "InferenceResponse.__init__", "output_tensors")
        for tensor in output_tensors:
            if tensor is None:  # pybind11 takes None for a tensor, Triton then refuses it
                raise TritonModelException(
                    "Output tensor for inference response should not be empty.")
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    "Expected a list of 'Tensor' objects in \"output_tensors\", found type "
                    f"'{type(tensor)}'."
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f'"error" must be a TritonError object or None, found type \'{type(error)}\'.'
            )
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters = {} if parameters is None else _parameters_dict(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string."""
        return json.dumps(self._parameters)

    def _send(self, sender: ResponseSender, final: bool) -> None:
        """Send through an engine sender: outputs shared, errors typed by their code."""
        if self._error is not None:
            # the model's own answer: its request still counts as a success, as in Triton
            sender.send(parameters=self._parameters, error=self._error._to_core(), final=final,
                        fails=False)
            return
        outputs = {tensor._name: _to_core(tensor) for tensor in self._output_tensors}
        sender.send(outputs, parameters=self._parameters, final=final)

    @classmethod
    def _from_core(cls, response: InferResponse) -> InferenceResponse:
        made = cls.__new__(cls)
        made._output_tensors = [_from_core(name, t) for name, t in response.outputs.items()]
        made._error = None if response.error is None else TritonError._from_core(response.error)
        made._parameters = dict(response.parameters)
        return made

    @classmethod
    def _from_error(cls, error: CoreTritonError) -> InferenceResponse:
        return cls(error=TritonError._from_core(error))

    def __repr__(self) -> str:
        names = [tensor._name for tensor in self._output_tensors]
        extra = f", error={self._error!r}" if self._error is not None else ""
        return f"InferenceResponse(outputs={names}{extra})"


class InferenceResponseSender:
    """Sends the responses of one request, from any thread (decoupled models)."""

    __slots__ = ("_request", "_decoupled", "_lock", "_closed", "_sent")

    def __init__(self, request: InferRequest | None, decoupled: bool) -> None:
        self._request = request
        self._decoupled = decoupled
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response``; ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` ends the request."""
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set "
                "to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"Expected an 'InferenceResponse' object, found type '{type(response)}'."
            )
        request = self._request
        if request is None or request.sender is None:
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if response is None and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            # A cancelled request the engine ended already (a decoupled model answering
            # after its execute, instance.py): as in Triton, what the model still sends
            # is dropped, without an error.
            dropped = not self._closed and request.sender.closed and request.cancelled
            if not dropped and (self._closed or request.sender.closed):
                self._closed = True
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            try:
                if dropped:
                    pass
                elif response is None:
                    request.sender.close()
                else:
                    response._send(request.sender, final)
            except CoreTritonError as exc:
                if not (request.cancelled and request.sender.closed):  # ended meanwhile
                    raise TritonModelException(
                        f"Unable to send response. {exc.message}") from exc
            if response is not None:
                self._sent += 1
            if final:
                self._closed = True

    def is_cancelled(self) -> bool:
        return self._request is not None and self._request.is_cancelled()

    def _fail(self, error: CoreTritonError) -> None:
        """Answer with ``error`` unless already finished; later sends raise (closed)."""
        with self._lock:
            self._closed = True
            sender = None if self._request is None else self._request.sender
            if sender is not None and not sender.closed:
                try:
                    sender.send(error=error, final=True)
                except CoreTritonError:  # closed meanwhile by the engine (cancelled)
                    pass

    @property
    def _used(self) -> bool:
        return self._sent > 0 or self._closed


# -- tracing -------------------------------------------------------------------------------
class InferenceTrace:
    """The trace of a request (``request.trace()``); pass it to a BLS request
    (``InferenceRequest(..., trace=request.trace())``) to trace the call as its child."""

    __slots__ = ("_handle",)

    def __init__(self, handle: TraceHandle | None = None) -> None:
        self._handle = handle

    def get_context(self, mode: str = "opentelemetry") -> str | None:
        """The OpenTelemetry context (JSON with ``traceparent``) of a request traced in
        opentelemetry mode; None otherwise."""
        if mode != "opentelemetry" or self._handle is None:
            return None
        context = self._handle.context()
        return None if context is None else json.dumps(context)

    def _child(self) -> TraceHandle:
        return NO_TRACE if self._handle is None else self._handle.spawn_child()


# -- requests ------------------------------------------------------------------------------
class InferenceRequest:
    """A request: the ones ``execute`` receives, or one a model builds to call another (BLS).

    BLS: ``InferenceRequest(model_name="m", inputs=[...], requested_output_names=[...])``
    then ``.exec()`` (or ``await .async_exec()``).
    """

    __slots__ = (
        "_request_id",
        "_correlation_id",
        "_inputs",
        "_requested_output_names",
        "_model_name",
        "_model_version",
        "_flags",
        "_timeout",
        "_parameters",
        "_core",
        "_decoupled",
        "_response_sender",
        "_trace",
        "_reschedule",
    )

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Sequence[str] | None = None,
        model_name: str | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: Any = None,
        parameters: Mapping[str, bool | int | str] | None = None,
    ) -> None:
        # preferred_memory is accepted as Triton does; outputs stay where the called model
        # put them. ``trace`` (the calling request's ``trace()``) traces the call as a child.
        # Arguments convert as Triton's bindings convert them (pb_utils/args.py): bytes or
        # np.str_ names are str, None where a value is required is a TypeError.
        function = "InferenceRequest.__init__"
        if inputs is None:
            raise TypeError("InferenceRequest() missing required argument 'inputs'")
        if requested_output_names is None:
            raise TypeError("InferenceRequest() missing required argument 'requested_output_names'")
        if model_name is None:
            raise TypeError("InferenceRequest() missing required argument 'model_name'")
        request_id = as_str(request_id, function, "request_id")
        model_name = as_str(model_name, function, "model_name")
        if correlation_id is None:  # any other object reaches Triton's own check below
            raise refused(function, "correlation_id", correlation_id, "int or str")
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        inputs = as_list(inputs, function, "inputs")
        for tensor in inputs:
            if tensor is None:  # pybind11 takes None for a tensor, Triton then refuses it
                raise TritonModelException(
                    f"Input tensor for request with id '{request_id}' and model name "
                    f"'{model_name}' should not be empty.")
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"Expected a list of 'Tensor' objects in \"inputs\", found type "
                    f"'{type(tensor)}'."
                )
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = inputs
        self._requested_output_names = [
            as_str(name, function, "requested_output_names")
            for name in as_list(requested_output_names, function, "requested_output_names")]
        self._model_name = model_name
        self._model_version = as_int(model_version, function, "model_version")
        self._flags = as_int(flags, function, "flags")
        self._timeout = as_int(timeout, function, "timeout")
        self._parameters = _parameters_dict(parameters)
        if trace is not None and not isinstance(trace, InferenceTrace):
            raise TritonModelException(
                f"Expected an 'InferenceTrace' object for \"trace\", found type '{type(trace)}'.")
        self._core: InferRequest | None = None
        self._decoupled = False
        self._response_sender: InferenceResponseSender | None = None
        self._trace: InferenceTrace | None = trace
        self._reschedule = False

    @classmethod
    def _wrap(
        cls, core: InferRequest, output_names: Sequence[str], decoupled: bool
    ) -> InferenceRequest:
        """The pb_utils view of an engine request: inputs wrapped, not copied."""
        made = cls.__new__(cls)
        made._request_id = core.id
        made._correlation_id = core.correlation_id
        made._inputs = [_from_core(name, tensor) for name, tensor in core.inputs.items()]
        wanted = core.requested_outputs
        # No requested outputs means all of them, as Triton's core fills in.
        made._requested_output_names = list(output_names if wanted is None else wanted)
        made._model_name = core.model_name
        made._model_version = core.model_version
        made._flags = (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if core.sequence_start else 0) | (
            TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if core.sequence_end else 0
        )
        made._timeout = core.timeout_us
        made._parameters = core.parameters
        made._core = core
        made._decoupled = decoupled
        made._response_sender = None
        made._trace = None
        made._reschedule = False
        return made

    # -- what execute reads ------------------------------------------------------------
    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> set[str]:
        """A set, as Triton's (a std::set on its side): the order is not kept."""
        return set(self._requested_output_names)

    def flags(self) -> int:
        """TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END bits."""
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        """The request timeout in microseconds (0: none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON string (``json.loads`` it): for a request the
        model received, the text Triton's backend writes (TritonJson); for one the model
        made, the stub's ``json.dumps`` of the dict it was given."""
        if self._core is not None:
            return triton_json(self._parameters)
        return json.dumps(self._parameters)

    def is_cancelled(self) -> bool:
        return self._core is not None and self._core.is_cancelled()

    def trace(self) -> InferenceTrace:
        """This request's trace (untraced requests give one that traces nothing)."""
        if self._trace is not None:
            return self._trace
        core_trace = None if self._core is None else self._core.trace
        return InferenceTrace(core_trace)

    def get_response_sender(self) -> InferenceResponseSender:
        sender = self._response_sender
        if sender is None:
            sender = self._response_sender = InferenceResponseSender(self._core, self._decoupled)
        return sender

    def set_release_flags(self, flags: int) -> None:
        """RESCHEDULE: once ``execute`` returns, the request goes back to its scheduler and
        runs again (a model with ``iterative_sequence``; a non-decoupled model returns None
        for it). ALL (the default) releases it."""
        if flags == TRITONSERVER_REQUEST_RELEASE_ALL:
            self._reschedule = False
            return
        if flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            self._reschedule = True
            return
        raise TritonModelException(f"Unsupported request release flags {flags}.")

    # -- BLS -----------------------------------------------------------------------------
    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on its model and wait: one response, or an iterator of them
        (``decoupled=True``). Errors come back as responses with ``has_error()``."""
        return self._exec(current_scope(), decoupled)

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[Any]:
        """``exec`` on the event loop's executor; await the result (as Triton does)."""
        loop = asyncio.get_running_loop()
        # Executor threads do not inherit the context: hand them the model's scope.
        return loop.run_in_executor(None, self._exec, current_scope(), decoupled)

    def _exec(
        self, scope: _Scope | None, decoupled: bool
    ) -> InferenceResponse | ResponseIterator:
        stream, error = self._start(scope, decoupled)
        if decoupled:
            responses = ResponseIterator(stream, error)
            # As Triton's exec: it returns once the first response is in, so an
            # `await async_exec(decoupled=True)` waits for it on the executor thread, not
            # in the `for` over the iterator, which would block the event loop.
            responses._prefetch()
            return responses
        if error is not None:
            return InferenceResponse._from_error(error)
        assert stream is not None
        last: InferenceResponse | None = None
        for core in iter(stream.next_response, None):
            response = InferenceResponse._from_core(core)
            if last is None or response.output_tensors() or response.has_error():
                last = response
        if last is None:
            return InferenceResponse(
                error=TritonError(f"model '{self._model_name}' sent no response to the request")
            )
        return last

    def _start(
        self, scope: _Scope | None, decoupled: bool
    ) -> tuple[ResponseStream | None, CoreTritonError | None]:
        infer = None if scope is None else scope.infer
        if infer is None:
            raise TritonModelException(
                "Unable to execute the inference request: BLS needs the model to be served by "
                "an infercore server, and none is attached to this model."
            )
        request = InferRequest(
            self._model_name,
            {tensor._name: _to_core(tensor) for tensor in self._inputs},
            model_version=self._model_version,
            id=self._request_id,
            # An empty list asks for every output, as in Triton.
            requested_outputs=self._requested_output_names or None,
            parameters=self._parameters,
            timeout_us=self._timeout,
            correlation_id=self._correlation_id,
            sequence_start=bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START),
            sequence_end=bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END),
        )
        # Untraced unless the model passes its request's trace (as in Triton).
        request.trace = NO_TRACE if self._trace is None else self._trace._child()
        request.single_response = not decoupled
        try:
            return infer(request), None
        except CoreTritonError as exc:  # rejected on entry: unknown model, bad input ...
            return None, bls_entry_error(self._model_name, exc)

    def __repr__(self) -> str:
        return f"InferenceRequest(model={self._model_name!r}, id={self._request_id!r})"


def bls_entry_error(model_name: str, error: CoreTritonError) -> CoreTritonError:
    """A BLS request refused on entry, in the words of Triton's Python backend: a model
    that is not there is "not ready" (Triton asks for readiness first), and every such
    error names the model it was sent to."""
    text = error.message
    # NotFound: not in the repository; the other: a version being unloaded (model.py)
    if isinstance(error, NotFoundError) or text.startswith("Request for unknown model"):
        text = f"Failed for execute the inference request. Model '{model_name}' is not ready."
    return type(error)(f"Model {model_name} - Error when running inference: {text}")


class ResponseIterator:
    """The responses of a BLS request sent with ``decoupled=True``, as they arrive.

    As in Triton, a final flag the model sent without a response (``send(flags=FINAL)``)
    is handed out too, as a last response with no outputs; a request refused on entry
    gives its one error response. The responses are kept: once every one was handed out,
    iterating again (``for``) starts over from the first, as Triton's iterator does."""

    __slots__ = ("_stream", "_error", "_final_seen", "_seen", "_index")

    def __init__(self, stream: ResponseStream | None, error: CoreTritonError | None) -> None:
        self._stream = stream
        self._error = error
        self._final_seen = stream is None and error is None
        self._seen: list[InferenceResponse] = []
        self._index = 0

    def __iter__(self) -> Iterator[InferenceResponse]:
        if self._final_seen and self._index >= len(self._seen):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        if self._index < len(self._seen):
            self._index += 1
            return self._seen[self._index - 1]
        if self._final_seen:
            raise StopIteration
        response = self._receive()
        self._seen.append(response)
        self._index += 1
        return response

    def _prefetch(self) -> None:
        """Wait for the first response (handed out first by the iteration)."""
        if not self._final_seen and not self._seen:
            self._seen.append(self._receive())

    def _receive(self) -> InferenceResponse:
        if self._error is not None:
            error, self._error = self._error, None
            self._final_seen = True
            return InferenceResponse._from_error(error)
        assert self._stream is not None
        core = self._stream.next_response()
        if core is None or core.final:
            self._final_seen = True
        return InferenceResponse() if core is None else InferenceResponse._from_core(core)

    def cancel(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
