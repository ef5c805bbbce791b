"""InferenceRequest: a reusable request object, as Triton's in-process API has one.

``model.create_request(...)`` (or ``InferenceRequest(model, ...)``) builds it; inputs,
requested outputs, parameters and delivery options are set on it, and ``model.infer(request)``
submits it. Each submission builds a fresh engine ``InferRequest`` from a snapshot of the
request, so the object can be changed and submitted again once its previous submission has
ended; submitting it while one is still in flight raises InvalidArgumentError.

What this adds to ``model.infer(inputs=...)``, each at no cost to that path (the engine
sees a request with a response callback, which it supports already):
- output placement (allocation.py): outputs copied once into the caller's buffers;
- a release callback: called once per submission when the server no longer needs the
  input buffers: when the final response (or final flag) is produced, which for a model
  that is not decoupled comes after its execution ended, and for a decoupled model when
  the model releases the request; also after an error on entry, a cancellation or a
  cache hit. It runs before the final response is delivered;
- a response queue (``queue.SimpleQueue``, an unbounded ``queue.Queue`` or an unbounded
  ``asyncio.Queue``) that receives every response, as Triton's ``response_queue``.

Threads: the caller's thread submits; the producing thread (a backend thread, or the caller
on a cache hit) runs ``_Delivery.__call__``. ``_lock`` guards only the in-flight flag.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .allocation import OutputAllocator, OutputPlacement, check_memory_type
from .errors import InvalidArgumentError
from .request import InferRequest, ParameterValue
from .request_trace import Trace, bind_trace
from .response import InferResponse, ResponseStream
from .tensor import DataType, MemoryType, Tensor, deserialize_bytes_tensor, tensors_from_inputs

if TYPE_CHECKING:
    from .handle import Model
    from .server_handles import HandleEngine

__all__ = ["InferenceRequest", "ReleaseCallback"]

logger = logging.getLogger(__name__)

ReleaseCallback = Callable[["InferenceRequest"], None]


class InferenceRequest:
    """A request for one model, built up by the caller and submitted with ``model.infer``.

    ``timeout`` is in microseconds and ``priority`` 0 means the model's default, as in
    Triton. ``correlation_id`` is an int or a str (sequences).
    """

    def __init__(
        self,
        model: Model,
        *,
        request_id: str = "",
        correlation_id: int | str = 0,
        priority: int = 0,
        timeout: int = 0,
        parameters: Mapping[str, ParameterValue] | None = None,
        sequence_start: bool = False,
        sequence_end: bool = False,
        inputs: Mapping[str, Any] | None = None,
        outputs: Sequence[str] | None = None,
        output_buffers: Mapping[str, Any] | None = None,
        output_allocator: OutputAllocator | None = None,
        output_memory_type: MemoryType | int | str = MemoryType.CPU,
        output_memory_type_id: int = 0,
        response_queue: Any = None,
        release_callback: ReleaseCallback | None = None,
        trace: Trace | None = None,
    ) -> None:
        self._model = model
        self.request_id = request_id
        self.correlation_id = correlation_id
        self.priority = priority
        self.timeout = timeout
        self.parameters: dict[str, ParameterValue] = {}
        for key, value in (parameters or {}).items():
            self.set_parameter(key, value)
        self.sequence_start = sequence_start
        self.sequence_end = sequence_end
        self._inputs: dict[str, Any] = {}
        for name, value in (inputs or {}).items():
            self.add_input(name, value)
        self._outputs: list[str] | None = None
        for name in outputs or ():
            self.add_requested_output(name)
        self._buffers: dict[str, Any] = dict(output_buffers or {})
        self.output_allocator = output_allocator
        self._memory_type = check_memory_type(output_memory_type)
        self.output_memory_type_id = int(output_memory_type_id)
        self.response_queue = response_queue
        self.release_callback = release_callback
        self.trace = trace
        self._lock = threading.Lock()
        self._in_flight = False

    # -- identity ----------------------------------------------------------------------
    @property
    def model(self) -> Model:
        return self._model

    @property
    def model_name(self) -> str:
        return self._model.name

    @property
    def model_version(self) -> int:
        return self._model.version

    @property
    def in_flight(self) -> bool:
        """Whether a submission of this request has not ended yet."""
        return self._in_flight

    def __repr__(self) -> str:
        return (f"InferenceRequest(model={self.model_name!r}, version={self.model_version}, "
                f"id={self.request_id!r})")

    # -- fields ------------------------------------------------------------------------
    @property
    def correlation_id(self) -> int | str:
        return self._correlation_id

    @correlation_id.setter
    def correlation_id(self, value: int | str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise InvalidArgumentError(
                f"correlation_id must be an int or a str, not {type(value).__name__}")
        if isinstance(value, int) and not 0 <= value < 2**64:
            raise InvalidArgumentError(f"correlation_id {value} is not an unsigned 64-bit int")
        self._correlation_id = value

    @property
    def priority(self) -> int:
        return self._priority

    @priority.setter
    def priority(self, value: int) -> None:
        self._priority = _non_negative("priority", value)

    @property
    def timeout(self) -> int:
        """Microseconds; 0 means none."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: int) -> None:
        self._timeout = _non_negative("timeout", value)

    def set_parameter(self, key: str, value: ParameterValue) -> None:
        if not isinstance(value, (str, int, float, bool)):
            raise InvalidArgumentError(
                f"parameter '{key}' must be a str, int, float or bool, not "
                f"{type(value).__name__}")
        self.parameters[key] = value

    # -- inputs ------------------------------------------------------------------------
    @property
    def inputs(self) -> Mapping[str, Any]:
        """Input name -> Tensor (or the value kept until its model's datatype is known)."""
        return MappingProxyType(self._inputs)

    def add_input(self, name: str, value: Any, datatype: DataType | str | None = None
                  ) -> None:
        """Add (or replace) an input from a numpy array, a ``Tensor``, a DLPack producer
        (torch, cupy...), or a list or scalar (converted with the model's datatype at
        submission unless ``datatype`` is given). Arrays are referenced, not copied."""
        if (datatype is not None or isinstance(value, (np.ndarray, Tensor))
                or (hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)))):
            value = Tensor.from_object(value, datatype)
        self._inputs[name] = value

    def add_input_bytes(self, name: str, data: bytes | bytearray | memoryview,
                        shape: Sequence[int], datatype: DataType | str) -> None:
        """Add an input from raw bytes with explicit dims and datatype (no copy).

        BYTES inputs take Triton's wire form (a 4-byte little-endian length before each
        element); other datatypes take the elements packed in little-endian order.
        """
        data_type = datatype if isinstance(datatype, DataType) else DataType.from_wire(
            str(datatype))
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise InvalidArgumentError(f"input '{name}' has a negative dimension: {list(dims)}")
        count = int(np.prod(dims, dtype=np.int64))
        if data_type is DataType.BYTES:
            array = deserialize_bytes_tensor(data, count).reshape(dims)
        else:
            expected = count * data_type.byte_size
            if len(memoryview(data).cast("B")) != expected:
                raise InvalidArgumentError(
                    f"input '{name}' has {len(memoryview(data).cast('B'))} bytes, but shape "
                    f"{list(dims)} of {data_type} needs {expected}")
            array = np.frombuffer(data, data_type.numpy_dtype).reshape(dims)
        self._inputs[name] = Tensor(data_type, array)

    def remove_input(self, name: str) -> None:
        if self._inputs.pop(name, None) is None:
            raise InvalidArgumentError(
                f"request for model '{self.model_name}' has no input '{name}'")

    def remove_all_inputs(self) -> None:
        self._inputs.clear()

    # -- outputs -----------------------------------------------------------------------
    @property
    def requested_outputs(self) -> tuple[str, ...] | None:
        """The outputs asked for; None means every output."""
        return None if self._outputs is None else tuple(self._outputs)

    def add_requested_output(self, name: str) -> None:
        if self._outputs is None:
            self._outputs = []
        if name not in self._outputs:
            self._outputs.append(name)

    def remove_requested_output(self, name: str) -> None:
        if self._outputs is None or name not in self._outputs:
            raise InvalidArgumentError(
                f"request for model '{self.model_name}' does not request output '{name}'")
        self._outputs.remove(name)
        if not self._outputs:
            self._outputs = None

    def remove_all_requested_outputs(self) -> None:
        """Ask for every output again (Triton's default)."""
        self._outputs = None

    def set_output_buffer(self, name: str, buffer: Any) -> None:
        """Copy output ``name`` into ``buffer`` (numpy array, bytearray, memoryview or a
        DLPack producer) instead of handing out the model's array."""
        self._buffers[name] = buffer

    def remove_output_buffer(self, name: str) -> None:
        self._buffers.pop(name, None)

    @property
    def output_buffers(self) -> Mapping[str, Any]:
        return MappingProxyType(self._buffers)

    @property
    def output_memory_type(self) -> MemoryType:
        return self._memory_type

    @output_memory_type.setter
    def output_memory_type(self, value: MemoryType | int | str) -> None:
        self._memory_type = check_memory_type(value)

    # -- submission (through Model.infer) ----------------------------------------------
    def _submit(self, server: HandleEngine, model: Model, raise_on_error: bool
                ) -> ResponseStream:
        """Start this request on ``server``, ``model``'s (Server._model_submit)."""
        if model != self._model:
            raise InvalidArgumentError(
                f"request for model '{self.model_name}' version {self.model_version} was "
                f"submitted to model '{model.name}' version {model.version}")
        loop, sink = self._sink()
        with self._lock:
            if self._in_flight:
                raise InvalidArgumentError(
                    f"request '{self.request_id}' for model '{self.model_name}' is still in "
                    "flight: submit it again after its final response (or create another)")
            self._in_flight = True
        delivery = _Delivery(self, sink, loop)
        try:
            loaded = server._resolve(model.name, model.version)
            request = InferRequest(
                model.name, tensors_from_inputs(self._inputs, loaded.config),
                model_version=model.version, id=self.request_id,
                requested_outputs=self._outputs, parameters=self.parameters,
                priority=self._priority, timeout_us=self._timeout,
                correlation_id=self._correlation_id, sequence_start=self.sequence_start,
                sequence_end=self.sequence_end)
            if self.trace is not None:
                bind_trace(request, self.trace)
            stream = ResponseStream(request, raise_on_error=raise_on_error)
            delivery.stream = stream
            delivery.version = loaded.version
            if self._buffers or self.output_allocator is not None or (
                    self._memory_type is MemoryType.GPU):
                delivery.placement = OutputPlacement(
                    self._buffers, self.output_allocator, self._memory_type,
                    self.output_memory_type_id)
            server._infer_on(loaded, request, raise_on_error=raise_on_error, callback=delivery)
            if delivery.sink is None:
                # A reader blocked on the stream may run the still-queued request itself,
                # as for model.infer(inputs=...); it tries once, and a request taken by
                # another version (a reload) or already answered is simply not found.
                stream._runner = loaded._dispatch
        except BaseException:
            delivery.finish()  # nothing runs: the inputs are the caller's again
            raise
        return stream

    def _sink(self) -> tuple[asyncio.AbstractEventLoop | None, Any]:
        """(the loop of an asyncio.Queue, the queue), after checking the queue is usable."""
        sink = self.response_queue
        if sink is None:
            return None, None
        if isinstance(sink, asyncio.Queue):
            if sink.maxsize > 0:
                raise InvalidArgumentError(_BOUNDED.format(sink.maxsize))
            try:
                return asyncio.get_running_loop(), sink
            except RuntimeError:
                raise InvalidArgumentError(
                    "an asyncio.Queue response_queue needs infer() to be called on the "
                    "event loop that reads it") from None
        if isinstance(sink, queue.Queue):
            if sink.maxsize > 0:
                raise InvalidArgumentError(_BOUNDED.format(sink.maxsize))
            return None, sink
        if isinstance(sink, queue.SimpleQueue):
            return None, sink
        raise InvalidArgumentError(
            "response_queue must be a queue.SimpleQueue, a queue.Queue or an asyncio.Queue, "
            f"not {type(sink).__name__}")

    def _ended(self) -> None:
        """A submission ended: the inputs are released and the request may be reused."""
        callback = self.release_callback
        self._in_flight = False
        if callback is not None:
            try:
                callback(self)
            except Exception:
                logger.exception("release callback of request '%s' for model '%s' raised",
                                 self.request_id, self.model_name)


_BOUNDED = ("response_queue must be unbounded (its maxsize is {}): a full queue would "
            "either stall the model's thread or lose responses, so bounded queues are refused")


class _Delivery:
    """The engine's response callback for one submission: place outputs, release the
    inputs at the end, then hand the response to the queue or the stream."""

    __slots__ = ("owner", "sink", "loop", "stream", "placement", "version", "_ended")

    def __init__(self, owner: InferenceRequest, sink: Any,
                 loop: asyncio.AbstractEventLoop | None) -> None:
        self.owner = owner
        self.sink = sink
        self.loop = loop
        self.stream: ResponseStream | None = None
        self.placement: OutputPlacement | None = None
        self.version = -1  # the version that took the request (for a bare final flag)
        self._ended = False

    def finish(self) -> None:
        if not self._ended:
            self._ended = True
            self.owner._ended()

    def __call__(self, response: InferResponse | None, final: bool) -> None:
        # Runs on the producing thread: it must never raise into the engine.
        placement = self.placement
        if placement is not None and response is not None and response.outputs:
            response = placement.place(response)
        if final:
            self.finish()
        stream = self.stream
        if self.sink is None:
            stream._push(response, final)  # type: ignore[union-attr]
            return
        if response is None:  # a bare final flag: the queue still hears the end
            request = stream.request  # type: ignore[union-attr]
            response = InferResponse(request.model_name, self.version, request.id)
        try:
            if self.loop is not None:
                self.loop.call_soon_threadsafe(self.sink.put_nowait, response)
            else:
                self.sink.put_nowait(response)
        except Exception:  # the reader's loop closed, or a queue that refuses items
            logger.exception("response of request '%s' for model '%s' could not be put on "
                             "its response_queue; cancelling the request",
                             self.owner.request_id, self.owner.model_name)
            stream.request.cancel()  # type: ignore[union-attr]
        if final:
            stream._push(None, True)  # type: ignore[union-attr]


def _non_negative(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
    return value

