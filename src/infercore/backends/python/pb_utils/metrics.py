"""pb_utils custom metrics: ``MetricFamily`` and its ``Metric``, as Triton's Python backend
has them, over the server's process-wide registry (custom_metrics.py).

    family = pb_utils.MetricFamily(name="my_latency_ns", description="...",
                                   kind=pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m"})
    metric.increment(12); metric.value()

Errors raise ``TritonModelException`` with Triton's rules: counters only go up and cannot
be set, only histograms observe (and need strictly increasing buckets), a family name
keeps its first kind, labels map str to str, and a metric whose family object was deleted
can no longer be used. As with Triton's stubs, a failed update says which one failed
("Failed to increment metric value: ...", likewise set, observe and get).

Where families live is this process's ``MetricsBackend``, installed before a model is
imported: in the server, the registry the engine hands to the model
(``ModelContext.metrics``, a ``backends.base.CustomMetrics``; the backend installs it);
in a process-isolated model's worker, a ``MetricsBackend`` (worker/metrics.py) whose
objects forward every operation to the server, with the same rules and error texts.
Triton's custom metrics are process-wide, so one backend serves every model of the process.

Threads: any model thread; ``_backend`` is replaced by loading threads, read once per
family (a family's metrics go where the family went).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ....custom_metric_rules import MetricKind
from ....errors import TritonError as CoreTritonError
from .error import TritonModelException

__all__ = ["Metric", "MetricFamily", "MetricsBackend", "use_metrics_backend"]


class MetricsBackend(Protocol):
    """Makes the family and metric objects pb_utils wraps: objects with the interface of
    ``custom_metrics.MetricFamily`` / ``Metric``, raising its typed errors (the part of
    ``backends.base.CustomMetrics`` pb_utils uses)."""

    def family(self, kind: MetricKind, name: str, description: str) -> Any: ...

    def metric(self, family: Any, labels: Mapping[str, str] | None,
               buckets: Sequence[float] | None) -> Any: ...


_backend: MetricsBackend | None = None  # None: no server handed one to this process yet


def use_metrics_backend(backend: MetricsBackend | None) -> MetricsBackend | None:
    """Where this process's pb_utils metrics live from now on; the one before."""
    global _backend
    previous, _backend = _backend, backend
    return previous


class Metric:
    """One labelled metric of a family; made by ``MetricFamily.Metric``."""

    __slots__ = ("_metric",)

    def __init__(self, metric: Any) -> None:  # a custom_metrics.Metric, or its worker twin
        self._metric = metric

    # Triton's stubs prefix each operation's error with what failed.
    def increment(self, value: float) -> None:
        _call(self._metric.increment, value, "Failed to increment metric value: ")

    def set(self, value: float) -> None:
        _call(self._metric.set_value, value, "Failed to set metric value: ")

    def observe(self, value: float) -> None:
        _call(self._metric.observe, value, "Failed to observe metric value: ")

    def value(self) -> float:
        try:
            return self._metric.value
        except CoreTritonError as exc:
            raise TritonModelException("Failed to get metric value: " + exc.message) from exc

    def __repr__(self) -> str:
        return f"pb_utils.{self._metric!r}"


class MetricFamily:
    """A custom metric family: ``MetricFamily(name, description, kind)``."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    __slots__ = ("_family", "_backend")

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        backend = _backend
        if backend is None:
            raise TritonModelException(
                "Error when creating MetricFamily: custom metrics are kept by the server, "
                "and no server loaded a Python model in this process")
        try:
            self._family = backend.family(kind, name, description)
        except CoreTritonError as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc.message}"
                                       ) from exc
        self._backend = backend

    def Metric(self, labels: Mapping[str, str] | None = None,  # noqa: N802 - Triton's name
               buckets: Sequence[float] | None = None) -> Metric:
        try:
            return Metric(self._backend.metric(self._family, labels, buckets))
        except CoreTritonError as exc:
            raise TritonModelException(f"Error when creating Metric: {exc.message}") from exc

    def __repr__(self) -> str:
        return f"pb_utils.{self._family!r}"


def _call(operation: object, value: float, failed: str) -> None:
    try:
        operation(value)  # type: ignore[operator]
    except CoreTritonError as exc:
        raise TritonModelException(failed + exc.message) from exc
