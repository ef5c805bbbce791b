"""InferRequest: what one inference asks for, and what the engine learns while serving it.

A request is built by a caller (the in-process API or a frontend), validated by its model,
queued by a scheduler and executed by an instance's backend thread. Its fields are written
by one thread at a time, in that order, so they need no lock; the cancel flag is the one
field written from any thread, and it is a plain bool set once (idempotent).

``trace`` is None for a request that its model may sample for tracing; the model sets it
to the request's trace when sampled. Requests a model sends itself (ensemble steps, BLS)
get their parent's child trace, or ``NO_TRACE`` (below: never sampled on their own, as
in Triton, where only requests from clients are sampled).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .tensor import Tensor

if TYPE_CHECKING:
    from .response import ResponseSender

__all__ = ["NO_TRACE", "InferRequest", "NoTrace", "ParameterValue", "TraceHandle",
           "request_label"]

ParameterValue = str | int | float | bool


class InferRequest:
    """One inference request.

    Backends read ``inputs`` (name -> Tensor, already validated and reshaped to the
    model's view), ``requested_outputs`` (None means every output), ``parameters``,
    ``id``, ``correlation_id``, ``sequence_start``/``sequence_end``, ``batch_size`` and
    ``is_cancelled()``, and answer through ``sender``.
    """

    __slots__ = (
        "model_name",
        "model_version",
        "id",
        "inputs",
        "requested_outputs",
        "parameters",
        "priority",
        "timeout_us",
        "correlation_id",
        "sequence_start",
        "sequence_end",
        "batch_size",
        "raw_input",
        "sender",
        "cancelled",
        "_cancel_hooks",
        "batch_key",
        "timed_out",
        "padding",
        "runs_on_loop",
        "single_response",
        "rescheduler",
        "trace",
        "frontend_stamps",
        # timestamps in monotonic ns, at Triton's statistics points
        "request_start_ns",
        "queue_start_ns",
        "compute_start_ns",
        "compute_input_end_ns",
        "compute_output_start_ns",
        "compute_end_ns",
    )

    def __init__(
        self,
        model_name: str,
        inputs: Mapping[str, Tensor],
        *,
        model_version: int = -1,
        id: str = "",
        requested_outputs: Sequence[str] | None = None,
        parameters: Mapping[str, ParameterValue] | None = None,
        priority: int = 0,
        timeout_us: int = 0,
        correlation_id: int | str = 0,
        sequence_start: bool = False,
        sequence_end: bool = False,
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.inputs: dict[str, Tensor] = dict(inputs)
        self.requested_outputs: tuple[str, ...] | None = (
            None if requested_outputs is None else tuple(requested_outputs)
        )
        self.parameters: dict[str, ParameterValue] = dict(parameters) if parameters else {}
        self.priority = priority
        self.timeout_us = timeout_us
        self.correlation_id = correlation_id
        self.sequence_start = sequence_start
        self.sequence_end = sequence_end
        self.batch_size = 0
        # the body of a raw binary request: the model's validator makes it its one input
        self.raw_input: Any = None
        self.sender: ResponseSender | None = None
        self.cancelled = False
        self._cancel_hooks: list[Callable[[], Any]] | None = None
        # Set by the dynamic batcher at enqueue: which requests may share a batch.
        self.batch_key: Any = None
        # Set by a scheduler that answers it "Request timeout expired" (its queue policy's
        # timeout passed): statistics count it REJECTED.
        self.timed_out = False
        # A null request the sequence batcher's direct strategy fills an empty slot with
        # (READY false): executed with its batch, answered to nobody, counted only in the
        # batch's size, as Triton counts its null requests.
        self.padding = False
        # Set by a scheduler that runs the request from the calling event loop (a
        # process-isolated instance driven from there): no other thread of this process
        # works on it (the HTTP frontend's busy polling relies on this).
        self.runs_on_loop = False
        # Set by a caller that takes one response only (a Python model's BLS ``exec()``
        # without ``decoupled=True``): a decoupled model refuses it at entry, as in Triton.
        self.single_response = False
        # Set by a scheduler that takes a request back to run it again (the sequence
        # batcher of an ``iterative_sequence`` model): a backend whose model asked for
        # the request to be rescheduled (Triton's TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        # hands it over once its execution returns. None: the model is not configured to.
        self.rescheduler: Callable[[InferRequest], None] | None = None
        self.trace: TraceHandle | None = None
        # Set by a frontend while tracing may sample (Tracer.active): its timestamps of
        # receiving the request, for the trace the model may start (trace_record.Trace).
        self.frontend_stamps: list[tuple[str, int]] | None = None
        self.request_start_ns = 0
        self.queue_start_ns = 0
        self.compute_start_ns = 0
        self.compute_input_end_ns = 0
        self.compute_output_start_ns = 0
        self.compute_end_ns = 0

    def is_cancelled(self) -> bool:
        return self.cancelled

    def cancel(self) -> None:
        """Set the cancel flag (idempotent) and run the hooks of whoever holds the request."""
        if self.cancelled:
            return
        self.cancelled = True
        hooks = self._cancel_hooks
        if hooks:
            self._cancel_hooks = None
            for hook in hooks:
                hook()

    def on_cancel(self, hook: Callable[[], Any]) -> None:
        """Call ``hook`` when the request is cancelled (at once if it already is)."""
        if self.cancelled:
            hook()
            return
        if self._cancel_hooks is None:
            self._cancel_hooks = []
        self._cancel_hooks.append(hook)

    def finished(self) -> None:
        """Its final response is out: drop the cancel hooks (they hold whoever queued or
        ran the request, and nothing is left to cancel)."""
        self._cancel_hooks = None

    def wants_output(self, name: str) -> bool:
        return self.requested_outputs is None or name in self.requested_outputs

    def __repr__(self) -> str:
        return (
            f"InferRequest(model={self.model_name!r}, version={self.model_version}, "
            f"id={self.id!r})"
        )


def request_label(request_id: str) -> str:
    """What Triton's core puts before the errors it finds in a request's inputs."""
    return f"[request id: {request_id or '<id_unknown>'}] "


# -- the trace handle a request carries (trace_record.Trace is the one that records) -------
class TraceHandle(Protocol):
    """What requests, models, ensembles and BLS see of a trace."""

    def spawn_child(self) -> TraceHandle: ...

    def begin(self, request: InferRequest, model_name: str, model_version: int) -> bool:
        """Bind the trace to its request; True if the sender must capture outputs."""
        ...

    def released(self, now_ns: int) -> None: ...

    def settled(self) -> None: ...

    def context(self) -> dict[str, str] | None:
        """The OpenTelemetry context to propagate (``traceparent``), if any."""
        ...


class NoTrace:
    """The trace of a request that is never traced (an untraced parent's child)."""

    __slots__ = ()

    def spawn_child(self) -> NoTrace:
        return self

    def begin(self, request: InferRequest, model_name: str, model_version: int) -> bool:
        return False

    def released(self, now_ns: int) -> None:
        pass

    def settled(self) -> None:
        pass

    def context(self) -> dict[str, str] | None:
        return None

    def __repr__(self) -> str:
        return "NO_TRACE"


NO_TRACE = NoTrace()
