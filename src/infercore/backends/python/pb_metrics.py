"""pb_utils custom metrics: ``MetricFamily`` and its ``Metric``, as Triton's Python backend
has them, over infercore's process-wide registry (custom_metrics.py).

    family = pb_utils.MetricFamily(name="my_latency_ns", description="...",
                                   kind=pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m"})
    metric.increment(12); metric.value()

Errors raise ``TritonModelException`` with Triton's rules: counters only go up and cannot
be set, only histograms observe (and need strictly increasing buckets), a family name
keeps its first kind, labels map str to str, and a metric whose family object was deleted
can no longer be used. Models run in isolated worker processes get a registry of their
own process, which is not forwarded to the server's metrics yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...custom_metrics import Metric as CoreMetric
from ...custom_metrics import MetricFamily as CoreMetricFamily
from ...custom_metrics import MetricKind
from ...errors import TritonError as CoreTritonError
from .pb_error import TritonModelException

__all__ = ["Metric", "MetricFamily"]


class Metric:
    """One labelled metric of a family; made by ``MetricFamily.Metric``."""

    __slots__ = ("_metric",)

    def __init__(self, metric: CoreMetric) -> None:
        self._metric = metric

    def increment(self, value: float) -> None:
        _call(self._metric.increment, value)

    def set(self, value: float) -> None:
        _call(self._metric.set_value, value)

    def observe(self, value: float) -> None:
        _call(self._metric.observe, value)

    def value(self) -> float:
        try:
            return self._metric.value
        except CoreTritonError as exc:
            raise TritonModelException(exc.message) from exc

    def __repr__(self) -> str:
        return f"pb_utils.{self._metric!r}"


class MetricFamily:
    """A custom metric family: ``MetricFamily(name, description, kind)``."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    __slots__ = ("_family",)

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        try:
            self._family = CoreMetricFamily(kind, name, description)
        except CoreTritonError as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc.message}"
                                       ) from exc

    def Metric(self, labels: Mapping[str, str] | None = None,  # noqa: N802 - Triton's name
               buckets: Sequence[float] | None = None) -> Metric:
        try:
            return Metric(CoreMetric(self._family, labels, buckets))
        except CoreTritonError as exc:
            raise TritonModelException(f"Error when creating Metric: {exc.message}") from exc

    def __repr__(self) -> str:
        return f"pb_utils.{self._family!r}"


def _call(operation: object, value: float) -> None:
    try:
        operation(value)  # type: ignore[operator]
    except CoreTritonError as exc:
        raise TritonModelException(exc.message) from exc
