"""Inside a worker: pb_utils custom metrics that live in the server's registry.

A process-isolated model's ``pb_utils.MetricFamily`` and ``Metric`` objects are twins of
objects the server holds for the worker (isolation/metrics.py), so the families appear on
the server's metrics endpoint and are shared by name with the server's other models, as
in Triton. Every operation is a METRIC frame on the event channel, which the server's event
thread applies in order:

    creating a family or a metric   a round trip: its errors (a name taken by another kind,
                                    buckets that differ from an existing metric's) come from
                                    the server's registry, raised here at once
    increment / set / observe       checked here with the registry's own rules and texts,
                                    then sent without waiting: one small write, no wake-up
                                    of this thread
    value()                         a round trip; as it travels behind this worker's earlier
                                    updates, it sees all of them
    the object going away           sent without waiting (the server drops its twin)

A metric whose family object this worker dropped sends its updates as round trips: whether
the family is gone depends on the server's other holders of the name, which only the
server knows; that is rare, and its errors then match the in-thread mode exactly.

Threads: any model thread creates and updates; the worker's reader thread passes replies
to ``reply``; the calls waiting for a reply are a ``PendingCalls`` (worker/calls.py).
Handles come from ``itertools.count``, whose ``next`` is atomic under the GIL.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ....custom_metric_rules import (
    MetricKind,
    check_family,
    check_update,
    metric_key,
    metric_value,
)
from ....errors import InvalidArgumentError
from ..ipc.protocol import (
    METRIC,
    OP_DROP,
    OP_FAMILY,
    OP_INCREMENT,
    OP_METRIC,
    OP_OBSERVE,
    OP_SET,
    OP_VALUE,
)
from .calls import PendingCalls

__all__ = ["RemoteMetric", "RemoteMetricFamily", "RemoteMetrics"]


class RemoteMetrics:
    """The worker's ``pb_metrics.MetricsBackend``: families and metrics held by the server."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._send = send
        self._handles = itertools.count(1)
        self._calls = PendingCalls(send)

    # -- pb_metrics.MetricsBackend ---------------------------------------------------------
    def family(self, kind: MetricKind, name: str, description: str) -> RemoteMetricFamily:
        return RemoteMetricFamily(self, kind, name, description)

    def metric(self, family: Any, labels: Mapping[str, str] | None,
               buckets: Sequence[float] | None) -> RemoteMetric:
        return RemoteMetric(self, family, labels, buckets)

    # -- the channel -------------------------------------------------------------------------
    def new_handle(self) -> int:
        return next(self._handles)

    def call(self, operation: int, handle: int, *arguments: Any) -> Any:
        """Apply an operation in the server and wait for its outcome.

        Raises:
            TritonError: the server's registry refused it (its typed error).
        """
        return self._calls.call(METRIC, operation, handle, *arguments)

    def post(self, operation: int, handle: int, *arguments: Any) -> None:
        """Apply an operation in the server without waiting."""
        self._send((METRIC, 0, operation, handle, *arguments))

    def reply(self, frame: tuple[Any, ...]) -> None:
        """A METRIC_REPLY frame (on the reader thread): wake its caller."""
        self._calls.reply(frame)


class _Life:
    """Whether this worker still holds a family object (shared with its metrics)."""

    __slots__ = ("dropped",)

    def __init__(self) -> None:
        self.dropped = False


def _drop_family(remote: RemoteMetrics, handle: int, life: _Life) -> None:
    life.dropped = True
    remote.post(OP_DROP, handle)


class RemoteMetricFamily:
    """``custom_metrics.MetricFamily``'s twin in a worker."""

    __slots__ = ("handle", "name", "kind", "description", "_life", "__weakref__")

    def __init__(self, remote: RemoteMetrics, kind: MetricKind, name: str,
                 description: str) -> None:
        check_family(name, kind)  # here: a bad name must not reach marshal
        description = str(description)
        handle = remote.new_handle()
        remote.call(OP_FAMILY, handle, name, description, kind.value)
        self.handle = handle
        self.name = name
        self.kind = kind
        self.description = description
        self._life = _Life()
        weakref.finalize(self, _drop_family, remote, handle, self._life).atexit = False

    def __repr__(self) -> str:
        return f"MetricFamily(name={self.name!r}, kind={self.kind.name})"


class RemoteMetric:
    """``custom_metrics.Metric``'s twin in a worker: ``increment``, ``set_value``,
    ``observe`` and ``value``, with the same errors."""

    __slots__ = ("_remote", "_handle", "_kind", "_family_name", "_life", "_labels",
                 "__weakref__")

    def __init__(self, remote: RemoteMetrics, family: Any, labels: Mapping[str, str] | None,
                 buckets: Sequence[float] | None) -> None:
        if not isinstance(family, RemoteMetricFamily):
            raise InvalidArgumentError("Metric needs a MetricFamily")
        key, bounds = metric_key(family.kind, labels, buckets)
        handle = remote.new_handle()
        remote.call(OP_METRIC, handle, family.handle, key, bounds)
        self._remote = remote
        self._handle = handle
        self._kind = family.kind
        self._family_name = family.name
        self._life = family._life
        self._labels = key
        weakref.finalize(self, remote.post, OP_DROP, handle).atexit = False

    @property
    def kind(self) -> MetricKind:
        return self._kind

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    @property
    def value(self) -> float:
        return float(self._remote.call(OP_VALUE, self._handle))

    def increment(self, value: float) -> None:
        self._update(OP_INCREMENT, "increment", value)

    def set_value(self, value: float) -> None:
        self._update(OP_SET, "set", value)

    def observe(self, value: float) -> None:
        self._update(OP_OBSERVE, "observe", value)

    def _update(self, operation: int, name: str, value: object) -> None:
        number = metric_value(value)
        if self._life.dropped:
            self._remote.call(operation, self._handle, number)
            return
        # The family is alive (this worker holds it): the registry would check just this.
        check_update(self._kind, self._family_name, name, number)
        self._remote.post(operation, self._handle, number)

    def __repr__(self) -> str:
        return f"Metric(family={self._family_name!r}, labels={self.labels})"
