"""RayBackendModel: the BackendModel of a model version with instance groups on Ray.

It stands where the backend's own model would (hook.py builds it), so the engine creates
every instance through it as usual: an instance of a group placed on Ray becomes a
RayInstance (an actor loading the model through the same backend), any other instance is
created by the backend's model here, which is itself created only if such a group exists.

Loading is parallel: each Ray instance's actor starts and loads as soon as the engine asks
for it, and the request for the model's last Ray instance waits for all of them (the first
failure fails the load, and every actor started is ended by the engine's finalize calls).

``health_reason`` is what the repository index shows while instances on Ray are down:
next to READY while the model serves on the others, next to UNAVAILABLE when ``serving``
is False (every instance is on Ray and none is ready: the version is reported not ready
until one is back). ``metric_families`` is the per-instance, per-node view of the metrics
(backends/ray/metrics.py).

Threads: the loading thread calls ``create_instance``; backend threads call ``pick_other``;
any thread reads ``health_reason``; the unloading thread calls ``finalize``. ``_lock``
guards the instance list and the round-robin position.
"""

from __future__ import annotations

import threading
from typing import Any

from ...metrics_settings import ModelMetricFamily
from ..base import Backend, BackendInstance, BackendModel, InstanceInfo, ModelContext
from .instance import Cluster, InstanceState, RayInstance, RayInstanceStatus
from .metrics import FAMILY_NAMES, instance_families
from .placement import RayPlacement

__all__ = ["RayBackendModel"]


class RayBackendModel:
    """Creates the instances of one model version, on Ray or here, group by group."""

    def __init__(
        self,
        backend: Backend,
        context: ModelContext,
        placements: dict[str, RayPlacement],
        cluster: Cluster,
    ) -> None:
        self._backend = backend
        self._context = context
        self._placements = placements
        self._cluster = cluster
        self._local: BackendModel | None = None
        self._lock = threading.Lock()
        self._instances: list[RayInstance] = []
        self._expected = sum(p.count for p in placements.values())
        self._turn = 0
        # Sequences belong to one instance: their payloads never move to another.
        self._failover = not context.config.HasField("sequence_batching")
        if context.metrics is not None:
            context.metrics.reserve(FAMILY_NAMES)  # families metric_families reports

    @property
    def context(self) -> ModelContext:
        return self._context

    def create_instance(self, info: InstanceInfo) -> BackendInstance:
        placement = self._placements.get(info.group_name)
        if placement is None:
            if self._local is None:
                self._local = self._backend.create_model(self._context)
            return self._local.create_instance(info)
        self._cluster.reserve(info.group_name)
        instance = RayInstance(self._context.name, info, self._cluster, placement,
                               pick_other=self.pick_other if self._failover else None)
        instance.start()
        with self._lock:
            self._instances.append(instance)
            last = len(self._instances) == self._expected
            started = list(self._instances)
        if last:
            try:
                for each in started:
                    each.wait_started()
            except BaseException:
                instance.finalize()  # the engine never got this one, so finalize it here
                raise
        return instance

    def pick_other(self, exclude: RayInstance) -> tuple[RayInstance, Any] | None:
        """A ready instance other than ``exclude`` (round robin) and its actor."""
        with self._lock:
            instances = list(self._instances)
            self._turn += 1
            turn = self._turn
        for offset in range(len(instances)):
            candidate = instances[(turn + offset) % len(instances)]
            if candidate is exclude:
                continue
            actor = candidate.ready_actor()
            if actor is not None:
                return candidate, actor
        return None

    def statuses(self) -> list[RayInstanceStatus]:
        """Each instance placed on Ray: its state, node, process and restarts."""
        with self._lock:
            instances = list(self._instances)
        return [instance.status() for instance in instances]

    @property
    def health_reason(self) -> str:
        """"" while every instance on Ray is ready; else how many are, and which are not."""
        statuses = [s for s in self.statuses() if s.state is not InstanceState.STOPPED]
        down = [s for s in statuses if s.state is not InstanceState.READY]
        if not down or len(statuses) < self._expected:  # still loading
            return ""
        names = ", ".join(f"{s.name} {s.state.value}" for s in down)
        how = "degraded" if self.serving else "unavailable"
        return (f"{how}: {len(statuses) - len(down)} of {len(statuses)} instances on Ray "
                f"available ({names})")

    @property
    def serving(self) -> bool:
        """Whether some instance can run requests: one here, or a ready one on Ray."""
        if self._local is not None:
            return True
        statuses = [s for s in self.statuses() if s.state is not InstanceState.STOPPED]
        if len(statuses) < self._expected:  # loading, or unloading: not ours to say
            return True
        return any(s.state is InstanceState.READY for s in statuses)

    def metric_families(self) -> tuple[ModelMetricFamily, ...]:
        return instance_families(self.statuses())

    def finalize(self) -> None:
        """Finalize what the engine did not (an unfinished load), then the local model and
        the placement groups."""
        with self._lock:
            instances, self._instances = self._instances, []
        for instance in instances:
            instance.finalize()
        if self._local is not None:
            self._local.finalize()
            self._local = None
        self._cluster.release()
