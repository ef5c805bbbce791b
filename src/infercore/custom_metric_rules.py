"""The rules of custom metrics, as values: kinds, and the checks of names, labels, buckets
and updates with their error texts.

The registry (observability/custom_metrics.py) applies them to the families it holds; a
process-isolated model's worker (backends/python/worker/metrics.py) applies the same ones
before it sends an update, so both raise the same typed errors with the same texts. No
state, no threads.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence

from .errors import InvalidArgumentError

__all__ = ["LabelKey", "MetricKind", "check_family", "check_update", "metric_key",
           "metric_value", "negative_increment_text", "unsupported_text"]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class MetricKind(enum.Enum):
    """Triton's TRITONSERVER_MetricKind."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


# a metric's labels, sorted: what tells the metrics of one family apart
LabelKey = tuple[tuple[str, str], ...]

# What an update may be, for a metric of a live family.
_KINDS_OF = {
    "increment": (MetricKind.COUNTER, MetricKind.GAUGE),
    "set": (MetricKind.GAUGE,),
    "observe": (MetricKind.HISTOGRAM,),
    "value": (MetricKind.COUNTER, MetricKind.GAUGE),
}


def check_family(name: object, kind: object) -> None:
    """A new family's name and kind, checked as the registry checks them.

    Raises:
        InvalidArgumentError: not a Prometheus name, or not a ``MetricKind``.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgumentError(
            f"invalid metric family name '{name}': must match [a-zA-Z_:][a-zA-Z0-9_:]*")
    if not isinstance(kind, MetricKind):
        raise InvalidArgumentError(f"invalid metric kind {kind!r}")


def metric_value(value: object) -> float:
    """A metric update's value as a float.

    Raises:
        InvalidArgumentError: not an int or a float (a bool is not a number here).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"metric values must be numbers, got {value!r}")
    return float(value)


def check_update(kind: MetricKind, family_name: str, operation: str, value: object) -> float:
    """The checks a metric makes of an ``operation`` ("increment", "set", "observe"),
    with its error texts; the value as a float.

    Raises:
        InvalidArgumentError: not a number, an operation the kind lacks, a counter decrement.
    """
    number = metric_value(value)
    if kind not in _KINDS_OF[operation]:
        raise InvalidArgumentError(unsupported_text(kind, operation))
    if kind is MetricKind.COUNTER and number < 0:
        raise InvalidArgumentError(negative_increment_text(family_name))
    return number


def metric_key(kind: MetricKind, labels: Mapping[str, str] | None,
               buckets: Sequence[float] | None) -> tuple[LabelKey, tuple[float, ...] | None]:
    """A new metric's labels and buckets (None but for histograms; +Inf left out), checked
    in that order.

    Raises:
        InvalidArgumentError: labels that are not a str -> str dict of valid names (a
            histogram's may not be "le"), buckets on a kind other than histogram, a histogram
            without buckets, buckets not strictly increasing.
    """
    return _label_key(labels, kind), _bounds(buckets, kind)


def unsupported_text(kind: MetricKind, operation: str) -> str:
    return f"metric of kind {kind.name} does not support '{operation}'"


def negative_increment_text(family_name: str) -> str:
    return f"counter '{family_name}' can only be incremented by a value >= 0"


def _label_key(labels: Mapping[str, str] | None, kind: MetricKind) -> LabelKey:
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise InvalidArgumentError(f"metric labels must be a dict, got {type(labels).__name__}")
    for name, value in labels.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidArgumentError(
                f"metric labels must map str to str, got {name!r}: {value!r}")
        if not _LABEL.match(name) or name.startswith("__"):
            raise InvalidArgumentError(f"invalid metric label name '{name}'")
        if kind is MetricKind.HISTOGRAM and name == "le":
            raise InvalidArgumentError("a histogram metric cannot have a label named 'le'")
    return tuple(sorted(labels.items()))


def _bounds(buckets: Sequence[float] | None, kind: MetricKind) -> tuple[float, ...] | None:
    if kind is not MetricKind.HISTOGRAM:
        if buckets is not None:
            raise InvalidArgumentError(f"buckets are only for histograms, not {kind.name}")
        return None
    if buckets is None:
        raise InvalidArgumentError("a histogram metric needs buckets")
    bounds = tuple(metric_value(b) for b in buckets)
    if any(b >= c for b, c in zip(bounds, bounds[1:], strict=False)):
        raise InvalidArgumentError(
            f"histogram buckets must be strictly increasing, got {list(bounds)}")
    if bounds and math.isinf(bounds[-1]):
        bounds = bounds[:-1]  # +Inf is always there
    return bounds
