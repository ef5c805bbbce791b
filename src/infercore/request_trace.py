"""Traces a caller attaches to its own requests: Triton's activities, delivered to callbacks.

    def on_activity(event):            # a TraceEvent
        print(event.trace.id, event.name, event.timestamp_ns)

    trace = infercore.Trace(activity=on_activity, tensor=on_tensor, context="...")
    stream = server.model("m").infer(inputs, trace=trace)
    trace.report_activity("APP_DECODE_START")   # a custom activity, timestamped now
    trace.wait()                                # every callback has run

This is tritonserver-rs's ``Trace`` (Triton's TRITONSERVER_InferenceTrace with an
activity function, a tensor activity function and a context string). A request carrying
a caller's trace is not sampled by the server's trace settings: the caller's trace
replaces the sampled one, as in Triton.

What the callbacks receive, per traced request, in this order:

    REQUEST_START, QUEUE_START, TENSOR_QUEUE_INPUT (each input), COMPUTE_START,
    TENSOR_BACKEND_INPUT (each input), COMPUTE_INPUT_END, COMPUTE_OUTPUT_START,
    TENSOR_BACKEND_OUTPUT (each output), COMPUTE_END, REQUEST_END

with custom activities (CUSTOM_ACTIVITY, named by the caller) placed by their timestamps.
A request that never executes (answered from the cache, an ensemble, refused) has no
COMPUTE_* activities. Tensor events come only when a tensor callback is given. Ensemble
steps and BLS calls made with ``trace=request.trace()`` get child traces (``parent_id``
set, same callbacks, a copy of the context); ``wait()`` returns once the children are
done too.

Timing: the engine records Triton's timestamps on the request itself, so the activities
of a request are delivered together, in order, once it has ended (its final response sent
and its execution recorded), on the thread that ends it; a custom activity reported after
that is delivered at once. Callbacks must be quick and must not block. A callback that
raises is logged; the request and the other callbacks go on.

Threads: the caller makes and attaches traces; the engine reports from the threads that
serve the request; one lock per trace tree (``_Tree.lock``) guards every trace's state;
callbacks run outside it. States of a trace: unused -> begun (attached to a request that
reached its model) -> finished (the request ended; events assembled) -> reported (events
delivered) -> closed (``done``: its children are closed too).
"""

from __future__ import annotations

import enum
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgumentError
from .observability.trace_record import request_timestamps
from .tensor import DataType, MemoryType, Tensor

if TYPE_CHECKING:
    from .request import InferRequest

__all__ = ["TensorTraceEvent", "Trace", "TraceActivity", "TraceEvent", "bind_trace"]

logger = logging.getLogger(__name__)


class TraceActivity(str, enum.Enum):
    """Triton's TRITONSERVER_InferenceTraceActivity."""

    REQUEST_START = "REQUEST_START"
    QUEUE_START = "QUEUE_START"
    COMPUTE_START = "COMPUTE_START"
    COMPUTE_INPUT_END = "COMPUTE_INPUT_END"
    COMPUTE_OUTPUT_START = "COMPUTE_OUTPUT_START"
    COMPUTE_END = "COMPUTE_END"
    REQUEST_END = "REQUEST_END"
    TENSOR_QUEUE_INPUT = "TENSOR_QUEUE_INPUT"
    TENSOR_BACKEND_INPUT = "TENSOR_BACKEND_INPUT"
    TENSOR_BACKEND_OUTPUT = "TENSOR_BACKEND_OUTPUT"
    CUSTOM_ACTIVITY = "CUSTOM_ACTIVITY"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One activity of a trace: Triton's (``name`` is the activity's) or a custom one
    (``activity`` CUSTOM_ACTIVITY, ``name`` the caller's). ``timestamp_ns`` is on the
    clock of ``time.monotonic_ns`` (Triton's steady clock)."""

    trace: Trace
    activity: TraceActivity
    timestamp_ns: int
    name: str

    def __repr__(self) -> str:
        return (f"TraceEvent(trace={self.trace.id}, name={self.name!r}, "
                f"timestamp_ns={self.timestamp_ns})")


@dataclass(frozen=True, slots=True)
class TensorTraceEvent:
    """One tensor seen at a trace point (TENSOR_QUEUE_INPUT, TENSOR_BACKEND_INPUT,
    TENSOR_BACKEND_OUTPUT). ``tensor`` is the engine's tensor itself, not a copy."""

    trace: Trace
    activity: TraceActivity
    name: str
    tensor: Tensor

    @property
    def datatype(self) -> DataType:
        return self.tensor.data_type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tensor.shape

    @property
    def memory_type(self) -> MemoryType:
        return self.tensor.memory_type

    def __repr__(self) -> str:
        return (f"TensorTraceEvent(trace={self.trace.id}, activity={self.activity.value!r}, "
                f"name={self.name!r}, datatype={self.datatype.value!r}, shape={self.shape})")


ActivityCallback = Callable[[TraceEvent], Any]
TensorCallback = Callable[[TensorTraceEvent], Any]

# Unique across the process (a Triton trace id is unique across its server).
_IDS = itertools.count(1)

# The activities of a backend execution; a request without them did not execute.
_COMPUTE = frozenset(("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
                      "COMPUTE_END"))


class _Tree:
    """What a trace shares with its children: the callbacks and the lock."""

    __slots__ = ("activity", "tensor", "lock")

    def __init__(self, activity: ActivityCallback | None,
                 tensor: TensorCallback | None) -> None:
        self.activity = activity
        self.tensor = tensor
        self.lock = threading.RLock()


# A delivery: ("activity" | "tensor", event) pairs to run outside the lock, in order.
_Delivery = list[tuple[str, Any]]


class Trace:
    """A trace of one request, reported to the caller's callbacks (module docstring).

    ``activity(event)`` receives each TraceEvent, ``tensor(event)`` each TensorTraceEvent
    (giving it asks for Triton's TENSORS level), of this trace and of its children.
    ``context`` is a string carried along (Triton's trace context); a model sees it
    through ``request.trace().get_context()`` when it is a JSON object.
    """

    __slots__ = ("id", "parent", "_tree", "_context", "_children", "_request", "_model_name",
                 "_model_version", "_request_id", "_begun", "_released_ns", "_settled",
                 "_finished", "_reported", "_closed", "_pending", "_queue_inputs",
                 "_outputs", "_custom", "_events", "_done")

    def __init__(self, activity: ActivityCallback | None = None,
                 tensor: TensorCallback | None = None, *, context: str = "",
                 _parent: Trace | None = None) -> None:
        for name, callback in (("activity", activity), ("tensor", tensor)):
            if callback is not None and not callable(callback):
                raise InvalidArgumentError(f"the {name} callback must be callable, got "
                                           f"{type(callback).__name__}")
        self.id = next(_IDS)
        self.parent = _parent
        self._tree: _Tree = (_parent._tree if _parent is not None
                             else _Tree(activity, tensor))
        self._context = _check_context(context)
        self._children: list[Trace] = []
        self._request: InferRequest | None = None
        self._model_name = ""
        self._model_version = -1
        self._request_id = ""
        self._begun = False
        self._released_ns = 0
        self._settled = False
        self._finished = False  # the request ended: own events assembled
        self._reported = False  # ... and delivered
        self._closed = False  # reported, and every begun child closed
        self._pending = 0  # children begun and not closed
        self._queue_inputs: list[tuple[str, Tensor]] = []
        self._outputs: list[tuple[str, Tensor]] = []
        self._custom: list[TraceEvent] = []  # reported before the request ended
        self._events: list[TraceEvent] = []
        self._done = threading.Event()

    def __repr__(self) -> str:
        state = "done" if self._done.is_set() else "running" if self._begun else "unused"
        return (f"Trace(id={self.id}, model={self._model_name!r}, "
                f"parent_id={self.parent_id}, {state})")

    # -- what the caller reads -------------------------------------------------------------
    @property
    def parent_id(self) -> int:
        """The parent trace's id; 0 for a trace without a parent (Triton's convention)."""
        return 0 if self.parent is None else self.parent.id

    @property
    def model_name(self) -> str:
        """The model of the traced request ("" until the request reaches its model)."""
        return self._model_name

    @property
    def model_version(self) -> int:
        return self._model_version

    @property
    def request_id(self) -> str:
        return self._request_id

    @property
    def context(self) -> str:
        return self._context

    @context.setter
    def context(self, value: str) -> None:
        self._context = _check_context(value)

    @property
    def children(self) -> list[Trace]:
        """Child traces (ensemble steps, BLS calls, ``spawn_child``), in creation order."""
        with self._tree.lock:
            return list(self._children)

    @property
    def events(self) -> list[TraceEvent]:
        """The activities delivered so far for this trace (not its children's)."""
        with self._tree.lock:
            return list(self._events)

    @property
    def done(self) -> bool:
        """The request ended, its activities were delivered and its children are done."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until ``done`` (at most ``timeout`` seconds); returns ``done``."""
        return self._done.wait(timeout)

    # -- what the caller does --------------------------------------------------------------
    def report_activity(self, name: str, timestamp_ns: int | None = None) -> None:
        """Report a custom activity (tritonserver-rs's ``Trace::report_activity``).

        ``timestamp_ns`` defaults to now on ``time.monotonic_ns``'s clock. Reported while
        the request runs, it is delivered with the request's activities, in timestamp
        order; reported after, it is delivered at once.
        """
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("a custom trace activity needs a non-empty name")
        if timestamp_ns is None:
            timestamp_ns = time.monotonic_ns()
        elif isinstance(timestamp_ns, bool) or not isinstance(timestamp_ns, int) or (
                timestamp_ns < 0):
            raise InvalidArgumentError(
                f"a trace timestamp must be a non-negative integer of ns, got {timestamp_ns!r}")
        event = TraceEvent(self, TraceActivity.CUSTOM_ACTIVITY, timestamp_ns, name)
        with self._tree.lock:
            if not self._finished:
                self._custom.append(event)
                return
            self._events.append(event)
        self._deliver([("activity", event)])

    def spawn_child(self) -> Trace:
        """A child trace (parent_id = this trace's id) with the same callbacks and a copy
        of the context, to attach to a request sent on this request's behalf."""
        child = Trace(context=self._context, _parent=self)
        with self._tree.lock:
            self._children.append(child)
        return child

    # -- what the engine reports (through _Handle) -------------------------------------------
    def _begin(self, request: InferRequest, model_name: str, model_version: int) -> bool:
        with self._tree.lock:
            if self._begun:
                if self._finished:
                    # Refused by a version being swapped out, then retried on the new one:
                    # the trace has already reported the refusal.
                    return False
                raise InvalidArgumentError(
                    f"trace {self.id} is already tracing a request to model "
                    f"'{self._model_name}': make a new Trace for each request")
            self._begun = True
            self._request = request
            self._model_name = model_name
            self._model_version = model_version
            self._request_id = request.id
            if self.parent is not None:
                self.parent._pending += 1
            capture = self._tree.tensor is not None
            if capture:
                self._queue_inputs = list(request.inputs.items())
            return capture

    def _released_at(self, now_ns: int) -> None:
        with self._tree.lock:
            if self._finished:
                return
            self._released_ns = now_ns
            delivery = self._finish() if self._settled else None
        if delivery is not None:
            self._report(delivery)

    def _settle(self) -> None:
        with self._tree.lock:
            if self._finished:
                return
            self._settled = True
            delivery = self._finish() if self._released_ns else None
        if delivery is not None:
            self._report(delivery)

    def _capture_outputs(self, outputs: Mapping[str, Tensor]) -> None:
        with self._tree.lock:
            self._outputs.extend(outputs.items())

    def _engine_context(self) -> dict[str, str] | None:
        """The context as the dict a model's ``get_context`` serialises (a JSON object,
        as Triton's contexts are; None otherwise)."""
        try:
            parsed = json.loads(self._context) if self._context else None
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None

    # -- assembling and delivering -----------------------------------------------------------
    def _finish(self) -> _Delivery:
        """The request ended (lock held): this trace's events, in delivery order."""
        self._finished = True
        request = self._request
        self._request = None  # the request refers to its trace: no cycle outlives it
        stamps = [] if request is None else request_timestamps(request, self._released_ns)
        tensors = self._tree.tensor is not None
        executed = any(name in _COMPUTE for name, _ in stamps)
        backend_inputs = list(request.inputs.items()) if (
            tensors and executed and request is not None) else []
        custom = sorted(self._custom, key=lambda event: event.timestamp_ns)
        self._custom = []
        delivery: _Delivery = []
        for name, ns in stamps:
            while custom and custom[0].timestamp_ns < ns:
                delivery.append(("activity", custom.pop(0)))
            if tensors and name == ("COMPUTE_END" if executed else "REQUEST_END"):
                delivery += self._tensor_events(TraceActivity.TENSOR_BACKEND_OUTPUT,
                                                self._outputs)
            delivery.append(("activity", TraceEvent(self, TraceActivity(name), ns, name)))
            if tensors and name == "QUEUE_START":
                delivery += self._tensor_events(TraceActivity.TENSOR_QUEUE_INPUT,
                                                self._queue_inputs)
            elif tensors and name == "COMPUTE_START":
                delivery += self._tensor_events(TraceActivity.TENSOR_BACKEND_INPUT,
                                                backend_inputs)
        delivery += [("activity", event) for event in custom]
        self._queue_inputs, self._outputs = [], []
        self._events += [event for kind, event in delivery if kind == "activity"]
        return delivery

    def _tensor_events(self, activity: TraceActivity,
                       tensors: list[tuple[str, Tensor]]) -> _Delivery:
        return [("tensor", TensorTraceEvent(self, activity, name, tensor))
                for name, tensor in tensors]

    def _report(self, delivery: _Delivery) -> None:
        """Deliver the assembled events, then close if no child is still running."""
        self._deliver(delivery)
        with self._tree.lock:
            self._reported = True
            closing = self._close_if_idle()
        for trace in closing:
            trace._done.set()

    def _deliver(self, delivery: _Delivery) -> None:
        tree = self._tree
        for kind, event in delivery:
            callback = tree.activity if kind == "activity" else tree.tensor
            if callback is None:
                continue
            try:
                callback(event)
            except Exception:  # noqa: BLE001 - a caller's callback never fails a request
                logger.exception("the %s callback of trace %d (model '%s') raised", kind,
                                 event.trace.id, event.trace.model_name)

    def _close_if_idle(self) -> list[Trace]:
        """Close this trace and, in turn, the parents it leaves idle (lock held)."""
        closing: list[Trace] = []
        trace: Trace | None = self
        while trace is not None and not trace._closed and trace._reported and (
                not trace._pending):
            trace._closed = True
            closing.append(trace)
            parent = trace.parent
            if parent is not None:
                parent._pending -= 1
            trace = parent
        return closing


class _Handle:
    """What the engine holds of a caller's trace: request.TraceHandle, plus the
    output capture TracingSender uses (trace_record.OutputCapture)."""

    __slots__ = ("trace",)

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def spawn_child(self) -> _Handle:
        return _Handle(self.trace.spawn_child())

    def begin(self, request: InferRequest, model_name: str, model_version: int) -> bool:
        return self.trace._begin(request, model_name, model_version)

    def released(self, now_ns: int) -> None:
        self.trace._released_at(now_ns)

    def settled(self) -> None:
        self.trace._settle()

    def context(self) -> dict[str, str] | None:
        return self.trace._engine_context()

    def capture_outputs(self, outputs: Mapping[str, Tensor]) -> None:
        self.trace._capture_outputs(outputs)

    def __repr__(self) -> str:
        return f"_Handle({self.trace!r})"


def bind_trace(request: InferRequest, trace: Trace) -> None:
    """Make ``trace`` the trace of ``request`` (``Model.infer(..., trace=trace)``)."""
    if not isinstance(trace, Trace):
        raise InvalidArgumentError(
            f"trace must be an infercore.Trace, got {type(trace).__name__}")
    if trace._begun:
        raise InvalidArgumentError(
            f"trace {trace.id} already traced a request to model '{trace.model_name}': "
            "make a new Trace for each request")
    request.trace = _Handle(trace)


def _check_context(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"a trace context must be a string, got {type(value).__name__}")
    return value
