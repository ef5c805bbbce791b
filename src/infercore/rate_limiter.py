"""The rate limiter: an instance executes only while the resources it declares are free.

Mode OFF: every call succeeds at once. Mode EXEC_COUNT (tritonserver's
``--rate-limit=execution_count``): each instance's config ``rate_limiter { resources
[{name, count, global}], priority }`` is what one execution of it consumes. Resources are
counted globally (``global: true``) or per device (the instance's device id). A resource
the server options do not size gets the largest count any single instance asks for (so
one instance can always run), as Triton does, unless the options size any resource at
all: then the others have none. An instance asking more than a resource holds fails to
load.

Fairness: instances waiting for resources are granted in order of a virtual time that
grows by the instance's priority (at least 1) at each grant, so an instance of priority 2
gets half the chances of one of priority 1 when they compete.

Threads: dispatch.py, its only caller at execution time, acquires and releases on behalf
of backend threads (blocking ``acquire``), callers running their own request and loops
starting a chain (``try_acquire``, never waiting); loading threads register instances.
``_cond`` guards the free counts, the waiters and the virtual times. Per-instance state:
waiting -> allocated -> released (-> waiting ...).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from .errors import InvalidArgumentError
from .options import RateLimiterResource, RateLimitMode

__all__ = ["RateLimiter", "ResourceAsk"]

_GLOBAL = -1


@dataclass(frozen=True, slots=True)
class ResourceAsk:
    """What one execution of an instance consumes, and its scheduling priority."""

    needs: tuple[tuple[str, int, int], ...]  # (resource, device or -1, count)
    priority: int = 1

    @classmethod
    def from_config(cls, group: model_config_pb2.ModelInstanceGroup, device_id: int
                    ) -> ResourceAsk:
        limiter = group.rate_limiter
        needs = tuple(
            (r.name, _GLOBAL if getattr(r, "global") else device_id, int(r.count))
            for r in limiter.resources
        )
        return cls(needs, max(1, int(limiter.priority)))


class RateLimiter:
    """Resource accounting and fair granting across every instance of every model."""

    def __init__(self, mode: RateLimitMode = RateLimitMode.OFF,
                 resources: Sequence[RateLimiterResource] = ()) -> None:
        self.enabled = mode is RateLimitMode.EXEC_COUNT
        self._cond = threading.Condition(threading.Lock())
        self._explicit = {(r.name, r.device): int(r.count) for r in resources}
        self._capacity: dict[tuple[str, int], int] = {}
        self._free: dict[tuple[str, int], int] = {}
        self._vtime: dict[int, int] = {}  # id(owner) -> virtual time
        self._waiting: list[tuple[int, object, ResourceAsk]] = []  # (vtime, owner, ask)
        self._vclock = 0  # the virtual time of the latest grant; newcomers start there

    def register(self, model_name: str, asks: Iterable[ResourceAsk]) -> None:
        """Check a model's instances against the resources and size implicit ones.

        As Triton's resource manager: once any resource is sized by the options, a
        resource they do not size has none (an instance needing it fails to load);
        otherwise a resource holds the most any one instance asks for.
        """
        if not self.enabled:
            return
        needed: dict[tuple[str, int], int] = {}
        for ask in asks:
            for name, device, count in ask.needs:
                needed[(name, device)] = max(count, needed.get((name, device), 0))
        with self._cond:
            for key, count in needed.items():
                if self._explicit:
                    available = self._sized(*key)
                    if available < count:
                        raise InvalidArgumentError(
                            f'Resource count for "{key[0]}" is limited to {available} which '
                            "will prevent scheduling of one or more model instances, the "
                            f"minimum required count is {count}")
                    if key not in self._capacity:
                        self._capacity[key] = self._free[key] = available
                    continue
                grown = count - self._capacity.get(key, 0)
                if grown > 0:
                    self._capacity[key] = count
                    self._free[key] = self._free.get(key, 0) + grown

    def _sized(self, name: str, device: int) -> int:
        """What the options give resource ``name`` on ``device``: a global resource the
        most any entry of that name gives; a device's, its own entry or the one for every
        device ("<name>:<count>"), the larger."""
        if device == _GLOBAL:
            return max((count for (named, _), count in self._explicit.items()
                        if named == name), default=0)
        return max(self._explicit.get((name, device), 0),
                   self._explicit.get((name, _GLOBAL), 0))

    def acquire(self, owner: object, ask: ResourceAsk) -> None:
        """Block until ``owner`` (an instance) may execute; take its resources."""
        if not self.enabled or not ask.needs:
            return
        with self._cond:
            entry = (self._vtime.setdefault(id(owner), self._vclock), owner, ask)
            self._waiting.append(entry)
            try:
                while not (self._is_next(owner) and self._fits(ask)):
                    self._cond.wait()
            finally:
                self._waiting.remove(entry)
            self._take(owner, ask)

    def try_acquire(self, owner: object, ask: ResourceAsk) -> bool:
        """Take the resources now if they are free and nobody waits ahead; else False."""
        if not self.enabled or not ask.needs:
            return True
        with self._cond:
            if self._waiting or not self._fits(ask):
                return False
            self._take(owner, ask)
            return True

    def release(self, owner: object, ask: ResourceAsk) -> None:
        if not self.enabled or not ask.needs:
            return
        with self._cond:
            for name, device, count in ask.needs:
                self._free[(name, device)] += count
            self._cond.notify_all()

    def free(self) -> dict[tuple[str, int], int]:
        """Free counts by (resource, device; -1 for global), for tests and diagnostics."""
        with self._cond:
            return dict(self._free)

    # -- helpers (hold _cond) ----------------------------------------------------------------
    def _fits(self, ask: ResourceAsk) -> bool:
        return all(self._free.get((name, device), 0) >= count
                   for name, device, count in ask.needs)

    def _is_next(self, owner: object) -> bool:
        """Is ``owner`` the most deserving waiter among those whose resources fit now?"""
        candidates = [w for w in self._waiting if self._fits(w[2])]
        if not candidates:
            return False
        return min(candidates, key=lambda w: w[0])[1] is owner

    def _take(self, owner: object, ask: ResourceAsk) -> None:
        for name, device, count in ask.needs:
            self._free[(name, device)] -= count
        start = self._vtime.get(id(owner), self._vclock)
        self._vclock = max(self._vclock, start)
        self._vtime[id(owner)] = start + ask.priority
