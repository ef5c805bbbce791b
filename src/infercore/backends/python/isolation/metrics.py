"""The server's side of a worker's custom metrics: the registry objects it holds for them.

A process-isolated model's ``pb_utils.MetricFamily`` and ``Metric`` objects live in its
worker (worker/metrics.py); each has a twin here, a family or metric of the registry the
engine handed to the model (``ModelContext.metrics``, a ``backends.base.CustomMetrics``),
created, updated, read and dropped by the worker's METRIC frames. So the families appear
on the metrics endpoint, share names with other models' families, and follow the
registry's rules and error texts, as in-thread models' do. When the worker ends (unload,
crash) its twins are dropped: a family nobody else holds leaves the metrics, as when an
in-thread model is unloaded. A restarted worker creates its metrics afresh, from zero (its
``initialize`` runs again).

Threads: only the worker's event thread calls ``handle`` and ``close``, in frame order, so
the table needs no lock; the registry objects lock themselves.
"""

from __future__ import annotations

import logging
from typing import Any

from ....custom_metric_rules import MetricKind
from ....errors import InternalError, TritonError, UnavailableError
from ...base import CustomMetrics
from ..ipc.protocol import (
    METRIC_REPLY,
    OP_DROP,
    OP_FAMILY,
    OP_INCREMENT,
    OP_METRIC,
    OP_OBSERVE,
    OP_SET,
    OP_VALUE,
)

__all__ = ["WorkerMetrics"]

logger = logging.getLogger(__name__)


class WorkerMetrics:
    """The registry objects one worker's metric operations act on, by handle."""

    def __init__(self, instance_name: str, registry: CustomMetrics | None) -> None:
        self._name = instance_name
        self._registry = registry  # None: a model loaded without a server
        self._objects: dict[int, Any] = {}  # handle -> the registry's family or metric

    @property
    def held(self) -> int:
        """How many families and metrics the worker holds here."""
        return len(self._objects)

    def handle(self, frame: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Apply one METRIC frame; the METRIC_REPLY to send, if the worker waits for one."""
        _, call, operation, handle, *arguments = frame
        value: Any = None
        error: tuple[int, str] | None = None
        try:
            value = self._apply(operation, handle, arguments)
        except TritonError as exc:
            error = (int(exc.code), exc.message)
        except Exception as exc:  # noqa: BLE001 - a malformed frame: the worker is told
            error = (int(InternalError.code), f"{type(exc).__name__}: {exc}")
        if call:
            return (METRIC_REPLY, call, error, value)
        if error is not None:  # an update raced with its family's deletion
            logger.warning("instance %s: a custom metric update failed: %s", self._name,
                           error[1])
        return None

    def _apply(self, operation: int, handle: int, arguments: list[Any]) -> Any:
        if operation == OP_FAMILY:
            name, description, kind = arguments
            self._objects[handle] = self._registry_of().family(
                MetricKind(kind), name, description)
            return None
        if operation == OP_METRIC:
            family_handle, labels, buckets = arguments
            family = self._objects[family_handle]
            self._objects[handle] = self._registry_of().metric(family, dict(labels), buckets)
            return None
        if operation == OP_DROP:
            self._objects.pop(handle, None)  # the last holder removes it from the registry
            return None
        metric = self._objects[handle]
        if operation == OP_INCREMENT:
            metric.increment(arguments[0])
        elif operation == OP_SET:
            metric.set_value(arguments[0])
        elif operation == OP_OBSERVE:
            metric.observe(arguments[0])
        elif operation == OP_VALUE:
            return metric.value
        else:
            raise InternalError(f"unknown metric operation {operation}")
        return None

    def _registry_of(self) -> CustomMetrics:
        if self._registry is None:
            raise UnavailableError(
                "custom metrics are kept by the server, and this model was loaded without one")
        return self._registry

    def close(self) -> None:
        """The worker is gone: drop everything it held."""
        self._objects.clear()
