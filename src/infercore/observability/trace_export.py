"""Where finished traces go: Triton's trace files, or OpenTelemetry spans.

``TraceFile`` writes as Triton's TraceFile does: with ``log_frequency`` 0 every group is
appended to one JSON array at ``<file>`` (closed with "]" when the server stops); otherwise
each batch of ``log_frequency`` groups becomes its own array in ``<file>.<index>``
(index from 0), and what is left at shutdown goes to the next index.

``OtelExporter`` (``trace_mode`` "opentelemetry") creates, per traced request, Triton's
spans: a root "InferRequest" span for a client's request, a span named after the model
(events REQUEST_START, QUEUE_START, REQUEST_END; attributes model_name, model_version,
request_id, trace id, parent id) and, when the model executed, a "compute" child span
(COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END). Ensemble steps and
BLS calls nest under their parent's model span. Spans start when the request is sampled
(so a model can propagate the context) and end, with the request's own timestamps turned
into wall-clock time, when its trace is assembled. Export is OTLP/HTTP through a batch span
processor with Triton's settings (url, resource, bsp_*). The SDK is an optional extra:
``pip install infercore[otel]``.

Threads: ``TraceFile.write`` is called by whichever thread finishes a trace; its lock
guards the open file and the index. The OpenTelemetry SDK is thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..clock import Clock, MonotonicClock
from ..errors import UnavailableError

if TYPE_CHECKING:
    from ..request import InferRequest
    from .trace_record import Trace

__all__ = ["OtelExporter", "TraceFile", "otlp_span_exporter"]

logger = logging.getLogger(__name__)


class TraceFile:
    """One trace file path, shared by every scope that writes to it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._main: Any = None  # the open main file, once something was written to it
        self._index = 0

    def write(self, groups: list[list[str]], *, indexed: bool) -> None:
        """Write groups of records (JSON texts): to the next ``<path>.<index>`` or appended
        to the main file. Failures are logged, never raised into a request's thread (as in
        Triton)."""
        text = ",".join(record for group in groups for record in group)
        if not text:
            return
        try:
            with self._lock:
                if indexed:
                    name = f"{self.path}.{self._index}"
                    self._index += 1
                    with open(name, "w", encoding="utf-8") as out:
                        out.write("[" + text + "]")
                    return
                if self._main is None:
                    self._main = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
                    self._main.write("[" + text)
                else:
                    self._main.write("," + text)
                self._main.flush()
        except OSError as exc:
            logger.error("failed writing trace file %s: %s", self.path, exc)

    def close(self) -> None:
        with self._lock:
            if self._main is not None:
                try:
                    self._main.write("]")
                    self._main.close()
                except OSError as exc:
                    logger.error("failed closing trace file %s: %s", self.path, exc)
                self._main = None


def otlp_span_exporter(url: str) -> Any:
    """The OTLP/HTTP span exporter Triton uses (tests replace this function)."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise UnavailableError(
            "trace mode opentelemetry needs the OpenTelemetry SDK and OTLP exporter: "
            "pip install 'infercore[otel]'") from exc
    return OTLPSpanExporter(endpoint=url)


class OtelExporter:
    """Spans for traced requests, through one TracerProvider owned by the server."""

    def __init__(self, url: str, resource: Mapping[str, str],
                 batch: Mapping[str, int], clock: Clock | None = None) -> None:
        try:
            from opentelemetry import trace as otel_trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise UnavailableError(
                "trace mode opentelemetry needs the OpenTelemetry SDK: "
                "pip install 'infercore[otel]'") from exc
        self._otel = otel_trace
        attributes = {"service.name": "triton-inference-server", **resource}
        self._provider = TracerProvider(resource=Resource.create(attributes))
        self._provider.add_span_processor(BatchSpanProcessor(
            otlp_span_exporter(url),
            max_queue_size=batch.get("bsp_max_queue_size", 2048),
            schedule_delay_millis=batch.get("bsp_schedule_delay", 5000),
            max_export_batch_size=batch.get("bsp_max_export_batch_size", 512),
        ))
        self._tracer = self._provider.get_tracer("infercore")
        # Request timestamps are on the engine's clock (as Triton's steady clock); spans
        # want wall time.
        self._clock = clock or MonotonicClock()
        self._offset_ns = time.time_ns() - self._clock.now_ns()

    def begin(self, trace: Trace, request: InferRequest, parent: Trace | None) -> None:
        """Start the trace's spans at its REQUEST_START (and its root span, top level)."""
        start = request.request_start_ns + self._offset_ns
        root = None
        if parent is None or parent.otel_spans is None:
            root = self._tracer.start_span("InferRequest", start_time=start)
            parent_span = root
        else:
            parent_span = parent.otel_spans[1]
        context = self._otel.set_span_in_context(parent_span)
        model_span = self._tracer.start_span(trace.model_name, context=context,
                                             start_time=start)
        trace.otel_spans = (root, model_span)

    def end(self, trace: Trace, stamps: list[tuple[str, int]],
            frontend: Sequence[tuple[str, int]] = ()) -> None:
        """Add the activities as events, make the compute span, end the spans; the
        frontend's timestamps are events of the root span (InferRequest), as Triton's."""
        spans = trace.otel_spans
        if spans is None:
            return
        root, model_span = spans
        offset = self._offset_ns
        request = trace.request
        model_span.set_attributes({
            "triton.model_name": trace.model_name,
            "triton.model_version": trace.model_version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
            "triton.request_id": "" if request is None else request.id,
        })
        compute = [(name, ns) for name, ns in stamps if name.startswith("COMPUTE_")]
        for name, ns in stamps:
            if not name.startswith("COMPUTE_"):
                model_span.add_event(name, timestamp=ns + offset)
        if compute:
            span = self._tracer.start_span(
                "compute", context=self._otel.set_span_in_context(model_span),
                start_time=compute[0][1] + offset)
            for name, ns in compute:
                span.add_event(name, timestamp=ns + offset)
            span.end(end_time=compute[-1][1] + offset)
        end = (stamps[-1][1] if stamps else self._clock.now_ns()) + offset
        model_span.end(end_time=end)
        if root is not None:
            for name, ns in frontend:
                root.add_event(name, timestamp=ns + offset)
            if frontend:
                end = max(end, max(ns for _, ns in frontend) + offset)
            root.end(end_time=end)

    def context(self, trace: Trace) -> dict[str, str] | None:
        """W3C trace context of the trace's model span, for a model to propagate."""
        spans = trace.otel_spans
        if spans is None:
            return None
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(
            carrier, context=self._otel.set_span_in_context(spans[1]))
        return carrier

    def close(self) -> None:
        """Export what is batched and stop (the server is stopping)."""
        self._provider.shutdown()
