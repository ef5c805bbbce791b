"""Custom metrics: families and metrics that models and applications define themselves.

    family = infercore.MetricFamily(infercore.MetricKind.COUNTER, "my_requests", "help")
    metric = infercore.Metric(family, labels={"model": "m"})
    metric.increment(1); metric.value

Python models use the same registry through ``pb_utils.MetricFamily``
(backends/python/pb_utils/metrics.py).

As in Triton, custom metrics live in one process-wide registry (Triton's Metrics
singleton): a family belongs to no server, and every server of the process (and its
metrics endpoint) shows every family. Families and metrics are reference counted by their
Python objects, as Triton's are by the C API: creating a family whose name exists returns
the existing one (same kind required; the first description stays), creating a metric
with existing labels shares its value, and the last object going away removes it from the
registry. Operations on a metric whose family was deleted fail, as in Triton.

Kinds: COUNTER (increment by >= 0, no set), GAUGE (increment by any value, set),
HISTOGRAM (observe only; buckets fixed per metric, strictly increasing).

Threads: any thread may create, update or delete; each family's ``_lock`` guards its
metrics and their values, the registry's ``_lock`` guards the family map. Rendering copies
values under the family lock.
"""

from __future__ import annotations

import bisect
import math
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import Metric as PromMetric
from prometheus_client.utils import floatToGoString

from ..custom_metric_rules import (
    LabelKey,
    MetricKind,
    check_family,
    metric_key,
    metric_value,
    negative_increment_text,
    unsupported_text,
)
from ..errors import AlreadyExistsError, InvalidArgumentError

__all__ = ["CustomMetricsRegistry", "Metric", "MetricFamily", "MetricKind", "REGISTRY",
           "register_reserved_names"]


class _MetricState:
    """One labelled series of a family; its values are guarded by the family's lock."""

    __slots__ = ("labels", "refs", "value", "bounds", "buckets", "count", "sum")

    def __init__(self, labels: LabelKey, bounds: tuple[float, ...] | None) -> None:
        self.labels = labels
        self.refs = 0
        self.value = 0.0
        self.bounds = bounds  # histograms only
        self.buckets = [0] * (len(bounds) + 1) if bounds is not None else []
        self.count = 0
        self.sum = 0.0


class _FamilyState:
    """A registered family: name, kind, description and its metrics."""

    def __init__(self, name: str, kind: MetricKind, description: str) -> None:
        self.name = name
        self.kind = kind
        self.description = description
        self.refs = 0
        self.deleted = False
        self.lock = threading.Lock()
        self.metrics: dict[LabelKey, _MetricState] = {}


class CustomMetricsRegistry:
    """All custom families of the process.

    Also what the engine hands to backends (``backends.base.CustomMetrics``, through
    ``ModelContext.metrics``): ``family`` and ``metric`` make the objects below, in this
    registry, and ``reserve`` keeps a backend's own family names from custom families.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _FamilyState] = {}
        self._reserved: set[str] = set()

    def __reduce__(self) -> tuple[Callable[[], CustomMetricsRegistry], tuple[()]]:
        # Sent to another process (a Ray actor's spec), a registry arrives as that
        # process's own: a model's metrics live in the process its instances run in.
        return (_process_registry, ())

    def reserve(self, names: Sequence[str]) -> None:
        """Names custom families may not take (the server's own metric families)."""
        with self._lock:
            self._reserved.update(names)

    def family(self, kind: MetricKind, name: str, description: str) -> MetricFamily:
        """``MetricFamily(kind, name, description)`` in this registry."""
        return MetricFamily(kind, name, description, registry=self)

    def metric(self, family: MetricFamily, labels: Mapping[str, str] | None,
               buckets: Sequence[float] | None) -> Metric:
        """``Metric(family, labels, buckets)``; ``family`` is one ``family`` made."""
        return Metric(family, labels, buckets)

    def acquire_family(self, name: str, kind: MetricKind, description: str) -> _FamilyState:
        check_family(name, kind)
        with self._lock:
            if name in self._reserved:
                raise AlreadyExistsError(
                    f"metric family '{name}' is one of the server's own metric families")
            state = self._families.get(name)
            if state is None:
                # Prometheus treats "x" and "x_total" counters as one name: keep them apart.
                twin = name[:-6] if name.endswith("_total") else name + "_total"
                if twin in self._families:
                    raise AlreadyExistsError(
                        f"metric family '{name}' conflicts with existing family '{twin}'")
                state = self._families[name] = _FamilyState(name, kind, str(description))
            elif state.kind is not kind:
                raise InvalidArgumentError(
                    f"metric family '{name}' already exists with kind "
                    f"{state.kind.name}, not {kind.name}")
            state.refs += 1
            return state

    def release_family(self, state: _FamilyState) -> None:
        with self._lock:
            state.refs -= 1
            if state.refs > 0:
                return
            if self._families.get(state.name) is state:
                del self._families[state.name]
        with state.lock:
            state.deleted = True
            state.metrics.clear()

    def families(self) -> list[_FamilyState]:
        with self._lock:
            return list(self._families.values())

    def collect(self) -> Iterator[PromMetric]:
        """prometheus_client metric families, one per custom family."""
        for state in self.families():
            with state.lock:
                series = [(m.labels, m.value, m.bounds, list(m.buckets), m.count, m.sum)
                          for m in state.metrics.values()]
            kind = state.kind
            family = PromMetric(state.name, state.description, kind.value)
            for labels, value, bounds, buckets, count, total in series:
                label_map = dict(labels)
                if kind is MetricKind.HISTOGRAM:
                    cumulative = 0
                    for bound, hits in zip((*(bounds or ()), math.inf), buckets, strict=True):
                        cumulative += hits
                        family.add_sample(state.name + "_bucket",
                                          {**label_map, "le": _le(bound)}, cumulative)
                    family.add_sample(state.name + "_count", label_map, count)
                    family.add_sample(state.name + "_sum", label_map, total)
                else:
                    family.add_sample(state.name, label_map, value)
            yield family


def _le(bound: float) -> str:
    return floatToGoString(bound)  # "+Inf", "0.1", "1.0": prometheus_client's spelling


REGISTRY = CustomMetricsRegistry()


def _process_registry() -> CustomMetricsRegistry:
    return REGISTRY


def register_reserved_names(names: Sequence[str]) -> None:
    REGISTRY.reserve(names)


class MetricFamily:
    """A custom metric family (Triton's TRITONSERVER_MetricFamily / tritonserver's).

    ``MetricFamily(kind, name, description)``; a family with the same name and kind is
    shared. The family is removed once this object and every other for the name are gone.
    """

    __slots__ = ("_state", "__weakref__")

    def __init__(self, kind: MetricKind, name: str, description: str = "",
                 registry: CustomMetricsRegistry | None = None) -> None:
        registry = registry or REGISTRY
        state = registry.acquire_family(name, kind, description)
        self._state = state
        weakref.finalize(self, registry.release_family, state)

    @property
    def name(self) -> str:
        return self._state.name

    @property
    def kind(self) -> MetricKind:
        return self._state.kind

    @property
    def description(self) -> str:
        return self._state.description

    def __repr__(self) -> str:
        return f"MetricFamily(name={self.name!r}, kind={self.kind.name})"


class Metric:
    """One labelled metric of a family (Triton's TRITONSERVER_Metric / tritonserver's).

    ``Metric(family, labels={"k": "v"})``; histograms also take ``buckets`` (upper bounds,
    strictly increasing; ``[]`` keeps only +Inf). Metrics with equal labels share a value.
    """

    __slots__ = ("_family", "_state", "__weakref__")

    def __init__(self, family: MetricFamily, labels: Mapping[str, str] | None = None,
                 buckets: Sequence[float] | None = None) -> None:
        if not isinstance(family, MetricFamily):
            raise InvalidArgumentError("Metric needs a MetricFamily")
        key, bounds = metric_key(family.kind, labels, buckets)
        state = family._state
        with state.lock:
            if state.deleted:
                raise InvalidArgumentError(_deleted_message())
            metric = state.metrics.get(key)
            if metric is None:
                metric = state.metrics[key] = _MetricState(key, bounds)
            elif bounds is not None and metric.bounds != bounds:
                raise InvalidArgumentError(
                    f"metric {dict(key)} of family '{state.name}' already exists with "
                    f"buckets {list(metric.bounds or ())}")
            metric.refs += 1
        self._family = state
        self._state = metric
        weakref.finalize(self, _release_metric, state, metric)

    @property
    def kind(self) -> MetricKind:
        return self._family.kind

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._state.labels)

    @property
    def value(self) -> float:
        """The current value (counters and gauges; histograms have none)."""
        family = self._family
        with family.lock:
            self._check_usable(family, "value", (MetricKind.COUNTER, MetricKind.GAUGE))
            return self._state.value

    def increment(self, value: float) -> None:
        """Add ``value`` (a counter only goes up)."""
        family = self._family
        value = metric_value(value)
        with family.lock:
            self._check_usable(family, "increment", (MetricKind.COUNTER, MetricKind.GAUGE))
            if family.kind is MetricKind.COUNTER and value < 0:
                raise InvalidArgumentError(negative_increment_text(family.name))
            self._state.value += value

    def set_value(self, value: float) -> None:
        """Set a gauge's value."""
        family = self._family
        value = metric_value(value)
        with family.lock:
            self._check_usable(family, "set", (MetricKind.GAUGE,))
            self._state.value = value

    def observe(self, value: float) -> None:
        """Count ``value`` into a histogram."""
        family = self._family
        value = metric_value(value)
        with family.lock:
            self._check_usable(family, "observe", (MetricKind.HISTOGRAM,))
            state = self._state
            state.buckets[bisect.bisect_left(state.bounds, value)] += 1  # type: ignore[arg-type]
            state.count += 1
            state.sum += value

    @staticmethod
    def _check_usable(family: _FamilyState, operation: str,
                      kinds: tuple[MetricKind, ...]) -> None:
        if family.deleted:
            raise InvalidArgumentError(_deleted_message())
        if family.kind not in kinds:
            raise InvalidArgumentError(unsupported_text(family.kind, operation))

    def __repr__(self) -> str:
        return f"Metric(family={self._family.name!r}, labels={self.labels})"


def _release_metric(family: _FamilyState, metric: _MetricState) -> None:
    with family.lock:
        metric.refs -= 1
        if metric.refs <= 0 and family.metrics.get(metric.labels) is metric:
            del family.metrics[metric.labels]


def _deleted_message() -> str:
    return "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."
