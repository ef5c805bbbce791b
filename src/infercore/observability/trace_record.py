"""One traced request: its Triton trace records, its children, its OpenTelemetry spans.

A ``Trace`` is made when a model samples a request (tracing.py) or when a traced request
sends one of its own (an ensemble step, a BLS call: ``spawn_child``). The request already
carries Triton's timestamps (request.py), so nothing is recorded while it runs; the trace
is assembled when two things have happened, in either order:

    released   the request's final response was sent (REQUEST_END)
    settled    its execution was recorded (stats.record_execution), or it failed without
               one (queue timeout, cancel, refused), or it was an ensemble that finished

and, for a request a frontend received (one that carries ``frontend_stamps``: its
HTTP_RECV_* or GRPC_WAITREAD_* timestamps, set only while tracing may sample), a third:

    answered   the frontend sent its answer (``frontend_done``), after stamping
               INFER_RESPONSE_COMPLETE and its send timestamps (``frontend_stamp``)

Then its records are built; once its children are done too, they travel up to the root,
and the root hands the whole group to its scope (one group per client request, as Triton
writes them). Requests that must never be traced on their own carry ``NO_TRACE``.

Threads: a trace hears from the caller's thread (begin), the instance thread (settled) and
whichever thread sends the final response (released); one lock per trace tree guards the
tree's state. Nothing here runs unless a request is traced.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson

from ..response import ResponseSender
from ..tensor import DataType, Tensor

if TYPE_CHECKING:
    from ..request import InferRequest

__all__ = ["OutputCapture", "Trace", "TraceScope", "TracingSender", "request_timestamps"]

# One record of Triton's trace file, already JSON text: records are rendered once, when
# their trace finishes, so writing a file is a join.
Record = str


class TraceScope(Protocol):
    """The settings a trace was sampled under (Triton's TraceSetting) and its outputs."""

    timestamps: bool
    tensors: bool
    otel: Any  # trace_export.OtelExporter or None

    def next_id(self) -> int: ...

    def now_ns(self) -> int:
        """The trace clock (the engine's)."""
        ...

    def collect(self, root: Trace, records: list[Record]) -> None: ...


class Trace:
    """A sampled request's trace (see the module docstring)."""

    __slots__ = ("id", "parent_id", "_scope", "_parent", "_lock", "_request", "_model_name",
                 "_model_version", "_released_ns", "_settled", "_finished", "_closed",
                 "_children", "_pending", "_own", "_outputs", "_frontend", "_held",
                 "otel_spans")

    def __init__(self, scope: TraceScope, parent: Trace | None = None) -> None:
        self.id = scope.next_id()
        self.parent_id = 0 if parent is None else parent.id
        self._scope = scope
        self._parent = parent
        # One lock for the whole tree: children report to parents while holding it.
        self._lock: threading.RLock = threading.RLock() if parent is None else parent._lock
        self._request: InferRequest | None = None
        self._model_name = ""
        self._model_version = -1
        self._released_ns = 0
        self._settled = False
        self._finished = False  # own records built
        self._closed = False  # own and children's records handed up
        self._children: list[Trace] = []
        self._pending = 0  # children begun and not closed
        self._own: list[Record] = []
        self._outputs: list[tuple[str, Tensor]] = []
        # the frontend's timestamps, and whether it has yet to answer (frontend_done)
        self._frontend: list[tuple[str, int]] = []
        self._held = False
        self.otel_spans: Any = None  # owned by the scope's OtelExporter

    def __repr__(self) -> str:
        return f"Trace(id={self.id}, model={self._model_name!r}, parent_id={self.parent_id})"

    # -- TraceHandle ---------------------------------------------------------------------
    def spawn_child(self) -> Trace:
        return Trace(self._scope, self)

    def begin(self, request: InferRequest, model_name: str, model_version: int) -> bool:
        self._request = request
        self._model_name = model_name
        self._model_version = model_version
        received = request.frontend_stamps
        if received is not None:  # a frontend's request: it stamps the rest as it answers
            self._frontend = list(received)
            self._held = True
        parent = self._parent
        if parent is not None:
            with self._lock:
                parent._children.append(self)
                parent._pending += 1
        otel = self._scope.otel
        if otel is not None:
            otel.begin(self, request, parent)
        return self._scope.tensors

    def released(self, now_ns: int) -> None:
        with self._lock:
            self._released_ns = now_ns
            if self._settled and not self._held:
                self._finish()

    def settled(self) -> None:
        with self._lock:
            self._settled = True
            if self._released_ns and not self._held:
                self._finish()

    # -- the frontend that received the request ------------------------------------------
    @property
    def held(self) -> bool:
        """The frontend that received the request has yet to say it answered."""
        return self._held

    def frontend_stamp(self, name: str) -> None:
        """One of the frontend's timestamps (INFER_RESPONSE_COMPLETE, *_SEND_*), now."""
        ns = self._scope.now_ns()
        with self._lock:
            if self._held:
                self._frontend.append((name, ns))

    def refused(self, stamps: list[tuple[str, int]]) -> None:
        """A trace a frontend sampled for a request refused before it reached its model
        (a body that cannot be decoded): only the frontend's timestamps, no model record,
        as Triton writes it."""
        with self._lock:
            self._frontend = list(stamps)
            self._finished = True
            stamp = '{"id":%d,"timestamps":[{"name":"%s","ns":%d}]}'
            self._own = [stamp % (self.id, name, ns) for name, ns in stamps]
            self._close_if_idle()

    def frontend_done(self) -> None:
        """The frontend answered (or gave up: the client went away): finish if the
        request has ended too. Idempotent."""
        with self._lock:
            if not self._held:
                return
            self._held = False
            if self._settled and self._released_ns:
                self._finish()

    def context(self) -> dict[str, str] | None:
        otel = self._scope.otel
        return None if otel is None else otel.context(self)

    # -- records -------------------------------------------------------------------------
    def capture_outputs(self, outputs: Mapping[str, Tensor]) -> None:
        """Outputs of one response (TENSORS level), from the sending thread."""
        with self._lock:
            self._outputs.extend(outputs.items())

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def model_version(self) -> int:
        return self._model_version

    @property
    def request(self) -> InferRequest | None:
        return self._request

    def timestamps(self) -> list[tuple[str, int]]:
        """Triton's activities with their monotonic ns, in Triton's order."""
        request = self._request
        return [] if request is None else request_timestamps(request, self._released_ns)

    def _finish(self) -> None:
        """Both events happened (lock held): build own records, end spans, close if idle."""
        if self._finished:
            return
        self._finished = True
        self._own = self._build_records()
        otel = self._scope.otel
        if otel is not None:
            otel.end(self, self.timestamps(), self._frontend)
        # The request refers to its trace: drop the way back, so no cycle outlives the
        # trace (they would wait for the cyclic garbage collector).
        self._request = None
        self._outputs = []
        self._close_if_idle()

    def _build_records(self) -> list[Record]:
        info: dict[str, Any] = {"id": self.id, "model_name": self._model_name,
                                "model_version": self._model_version}
        request = self._request
        if request is not None and request.id:
            info["request_id"] = request.id
        if self.parent_id:
            info["parent_id"] = self.parent_id
        stamp = '{"id":%d,"timestamps":[{"name":"%s","ns":%d}]}'  # names are constants
        trace_id = self.id
        stamps = self.timestamps() if self._scope.timestamps else []
        records = []
        if stamps and self._frontend:
            # As Triton writes them: what the frontend stamped before the request reached
            # its model (HTTP_RECV_*, GRPC_WAITREAD_*) ahead of the model's record, the
            # rest (INFER_RESPONSE_COMPLETE, *_SEND_*) among the model's, by time.
            start = stamps[0][1]
            records = [stamp % (trace_id, name, ns) for name, ns in self._frontend
                       if ns <= start]
            later = [s for s in self._frontend if s[1] > start]
            stamps = list(heapq.merge(stamps, later, key=_by_time))
        records.append(orjson.dumps(info).decode())
        if not self._scope.tensors:
            records += [stamp % (trace_id, name, ns) for name, ns in stamps]
            return records
        inputs: list[Record] = []
        outputs: list[Record] = []
        if request is not None:
            inputs = _tensor_records(trace_id, "TENSOR_QUEUE_INPUT", request.inputs.items())
            outputs = _tensor_records(trace_id, "TENSOR_BACKEND_OUTPUT", self._outputs)
        # Where Triton reports them: inputs as the request is queued, outputs as the
        # backend (or, for an ensemble, the last step) answers.
        last_output_point = ("COMPUTE_END" if any(n == "COMPUTE_END" for n, _ in stamps)
                             else "REQUEST_END")
        for name, ns in stamps:
            if name == last_output_point:
                records += outputs
                outputs = []
            records.append(stamp % (trace_id, name, ns))
            if name == "QUEUE_START":
                records += inputs
                inputs = []
        return records + inputs + outputs

    def _close_if_idle(self) -> None:
        if self._closed or not self._finished or self._pending:
            return
        self._closed = True
        parent = self._parent
        if parent is not None:
            parent._pending -= 1
            parent._close_if_idle()
        else:
            self._scope.collect(self, self.group() if self._children else self._own)
            self._children = []  # parent <-> child cycles end here

    def group(self, *, partial: bool = False) -> list[Record]:
        """This trace's records then its children's, depth first. ``partial``: build what
        the unfinished ones have (the server is stopping)."""
        with self._lock:
            own = self._own if self._finished or not partial else self._build_records()
            records = list(own)
            for child in self._children:
                records += child.group(partial=partial)
            return records


def _by_time(stamp: tuple[str, int]) -> int:
    return stamp[1]


def request_timestamps(request: InferRequest, released_ns: int) -> list[tuple[str, int]]:
    """Triton's activities of ``request`` with their monotonic ns, in Triton's order.

    REQUEST_END is the later of the final response (``released_ns``) and the end of
    execution: Triton records it when the backend releases the request, which is never
    before its execution ends (a decoupled model may send its final response sooner).
    """
    stamps = [("REQUEST_START", request.request_start_ns),
              # An ensemble hands its steps on at once: its queue starts as it arrives.
              ("QUEUE_START", request.queue_start_ns or request.request_start_ns)]
    if request.compute_start_ns:
        stamps += [("COMPUTE_START", request.compute_start_ns),
                   ("COMPUTE_INPUT_END", request.compute_input_end_ns),
                   ("COMPUTE_OUTPUT_START", request.compute_output_start_ns),
                   ("COMPUTE_END", request.compute_end_ns)]
    end = max(released_ns, request.compute_end_ns)
    if end:
        stamps.append(("REQUEST_END", end))
    return [(name, ns) for name, ns in stamps if ns]


def _tensor_records(trace_id: int, activity: str,
                    tensors: Iterable[tuple[str, Tensor]]) -> list[Record]:
    """Triton's TENSORS records: data as comma-separated values, shape as "d0,d1"."""
    records = []
    for name, tensor in tensors:
        try:
            array = tensor.to_numpy()
        except Exception:  # noqa: BLE001 - a GPU tensor: Triton copies it; say so instead
            data = "<not in CPU memory>"
        else:
            data = _format_data(array, tensor.data_type)
        records.append(orjson.dumps({"id": trace_id, "activity": activity, "tensor": {
            "name": name, "data": data,
            "shape": ",".join(str(d) for d in tensor.shape),
            "dtype": tensor.data_type.value}}).decode())
    return records


def _format_data(array: np.ndarray, data_type: DataType) -> str:
    if data_type is DataType.BYTES:
        return ",".join(
            '"' + (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) + '"'
            for v in array.flat)
    return ",".join(str(v) for v in array.flat)


class OutputCapture(Protocol):
    """A trace that keeps the outputs of its request's responses (TENSORS level)."""

    def capture_outputs(self, outputs: Mapping[str, Tensor]) -> None: ...


class TracingSender(ResponseSender):
    """A ResponseSender that also hands each response's outputs to the request's trace
    (TENSORS level); used only for requests traced at that level."""

    __slots__ = ("_trace",)

    def __init__(self, trace: OutputCapture, request: InferRequest, stream: Any, model: str,
                 version: int, on_close: Callable[[InferRequest], None] | None) -> None:
        super().__init__(request, stream, model, version, on_close)
        self._trace = trace

    def send(self, outputs: Mapping[str, Tensor] | None = None, **kwargs: Any) -> None:
        request = self._request  # None once finished: then send refuses
        if outputs and request is not None and not self.closed:
            wanted = request.requested_outputs
            self._trace.capture_outputs(
                {n: t for n, t in outputs.items() if wanted is None or n in wanted})
        super().send(outputs, **kwargs)
