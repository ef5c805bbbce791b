"""Metrics settings and the families a model contributes (a value module; observability/metrics.py
reports them).

``MetricsSettings`` is what to report: Options' metrics switches and tritonserver's
``metrics_configuration`` (``from_configuration`` checks it); ``parse_metrics_config``
reads ``--metrics-config`` values. ``ModelMetricFamily`` is one family a loaded model adds
beside Triton's (a model on Ray: backends/ray/metrics.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["DEFAULT_QUANTILES", "MetricsSettings", "ModelMetricFamily", "parse_metrics_config"]

logger = logging.getLogger(__name__)

# Triton's default summary quantiles (quantile, allowed error).
DEFAULT_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.0001))

_BOOLEAN_KEYS = ("counter_latencies", "summary_latencies", "histogram_latencies")


@dataclass(frozen=True, slots=True)
class ModelMetricFamily:
    """A family a loaded model adds beside Triton's (see observability/metrics.py's docstring).

    ``samples`` are (labels, value) pairs; the labels are those beyond ``model`` and
    ``version``, which the server adds. ``kind`` is "counter" or "gauge".
    """

    name: str
    help: str
    kind: str
    samples: tuple[tuple[Mapping[str, str], float], ...]


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """What to report: Options' metrics switches and ``metrics_configuration``."""

    enabled: bool = True
    cpu: bool = True
    gpu: bool = True
    interval_ms: int = 2000
    counter_latencies: bool = True
    summary_latencies: bool = False
    histogram_latencies: bool = False
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES

    @classmethod
    def from_configuration(cls, configuration: Mapping[str, Mapping[str, str]], *,
                           enabled: bool = True, cpu: bool = True, gpu: bool = True,
                           interval_ms: int = 2000) -> MetricsSettings:
        """Settings from tritonserver's ``metrics_configuration`` (group "" holds
        counter_latencies, summary_latencies, histogram_latencies, summary_quantiles).

        Raises InvalidArgumentError for a malformed value; unknown settings are ignored
        with a warning, as Triton ignores them.
        """
        if interval_ms <= 0:
            raise InvalidArgumentError("metrics_interval must be > 0 milliseconds")
        values: dict[str, Any] = {}
        for group, settings in configuration.items():
            for key, value in settings.items():
                if group or key not in (*_BOOLEAN_KEYS, "summary_quantiles"):
                    logger.warning("unknown metrics configuration setting '%s%s%s' ignored",
                                   group, "," if group else "", key)
                elif key == "summary_quantiles":
                    values["quantiles"] = _quantiles(value)
                else:
                    values[key] = _boolean(key, value)
        return cls(enabled=enabled, cpu=cpu, gpu=gpu, interval_ms=interval_ms, **values)


def parse_metrics_config(items: Sequence[str]) -> dict[str, dict[str, str]]:
    """tritonserver's ``--metrics-config <setting>=<value>`` values ->
    ``Options.metrics_configuration`` (every setting in group ""; tritonserver refuses a
    group name, a ',' before the '=')."""
    configuration: dict[str, dict[str, str]] = {}
    for item in items:
        setting, equals, value = item.partition("=")
        if not equals or "," in setting or not setting or not value:
            raise InvalidArgumentError(
                f"--metrics-config option format is <setting>=<value>. Got {item}")
        configuration.setdefault("", {})[setting] = value
    return configuration


def _boolean(key: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise InvalidArgumentError(f"metrics setting {key} must be true or false, got '{value}'")


def _quantiles(text: str) -> tuple[tuple[float, float], ...]:
    pairs = []
    for part in text.split(","):
        quantile, colon, error = part.strip().partition(":")
        try:
            if not colon:
                raise ValueError
            q, e = float(quantile), float(error)
        except ValueError:
            raise InvalidArgumentError(
                f"invalid summary_quantiles '{text}', expected <quantile>:<error>,...") from None
        if not 0.0 <= q <= 1.0:
            raise InvalidArgumentError(f"summary quantile {q} is not within [0, 1]")
        pairs.append((q, e))
    return tuple(pairs)
