"""Priority levels and queue policies of the dynamic batcher (Triton's PriorityQueue).

Levels are numbered from 1 (most urgent). Each level has a policy: ``max_queue_size`` (0:
unbounded; a full level rejects with "Exceeds maximum queue size"), a default timeout and
whether a request's own timeout may shorten it, and what happens at the timeout: REJECT
(answered "Request timeout expired", never executed) or DELAY (moved behind the
non-delayed requests of its own level, still ahead of every less urgent level, as
Triton's PolicyQueue keeps a delayed queue per level). A request's own timeout only
shortens its level's default one (none without a default). A request's priority 0, or
one beyond the levels, means the default level, as in Triton. Only the levels that hold
requests exist (``priority_levels`` may be 2^64 - 1).

Not thread-safe: the owning scheduler calls it under its own lock.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from ..errors import UnavailableError
from ..request import InferRequest

__all__ = ["QueuePolicy", "PriorityQueue"]

_REJECT = model_config_pb2.ModelQueuePolicy.TimeoutAction.REJECT


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    reject_on_timeout: bool = True
    default_timeout_us: int = 0
    allow_timeout_override: bool = True
    max_queue_size: int = 0

    @classmethod
    def from_config(cls, policy: model_config_pb2.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            reject_on_timeout=policy.timeout_action == _REJECT,
            default_timeout_us=int(policy.default_timeout_microseconds),
            allow_timeout_override=bool(policy.allow_timeout_override),
            max_queue_size=int(policy.max_queue_size),
        )

    def timeout_us(self, request: InferRequest) -> int:
        """The queue timeout of ``request`` under this policy (0: none). As Triton's
        PolicyQueue::Enqueue: a request's own timeout only shortens the default one; with
        no default, it has none."""
        timeout = self.default_timeout_us
        own = request.timeout_us
        if self.allow_timeout_override and 0 < own < timeout:
            timeout = own
        return timeout


class _Level:
    __slots__ = ("policy", "pending", "delayed")

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        # (request, deadline_ns or 0) in arrival order
        self.pending: deque[tuple[InferRequest, int]] = deque()
        self.delayed: deque[InferRequest] = deque()

    def __len__(self) -> int:
        return len(self.pending) + len(self.delayed)


class PriorityQueue:
    """Requests by priority level, each level FIFO with its own policy.

    A level's queue exists only while it holds requests: ``priority_levels`` may be any
    uint64 (2^64 - 1 is a valid config), so the levels are never listed one by one, as
    Triton's queues are made per level on first use.
    """

    def __init__(self, count: int, default_policy: QueuePolicy,
                 policies: dict[int, QueuePolicy], default_level: int) -> None:
        self._count = max(1, count)
        self._default_policy = default_policy
        self._policies = {level: policy for level, policy in policies.items()
                          if 1 <= level <= self._count}
        self._default = default_level if 1 <= default_level <= self._count else 1
        self._levels: dict[int, _Level] = {}  # the levels holding requests
        self._order: list[int] = []  # their keys, sorted (most urgent first)
        self._size = 0

    @classmethod
    def from_config(cls, batching: model_config_pb2.ModelDynamicBatching | None
                    ) -> PriorityQueue:
        """One level with the default policy, or the levels a dynamic_batching block asks."""
        if batching is None:
            return cls(1, QueuePolicy(), {}, 1)
        default = (QueuePolicy.from_config(batching.default_queue_policy)
                   if batching.HasField("default_queue_policy")
                   else QueuePolicy(allow_timeout_override=False))
        policies = {int(level): QueuePolicy.from_config(policy)
                    for level, policy in batching.priority_queue_policy.items()}
        return cls(int(batching.priority_levels), default, policies,
                   int(batching.default_priority_level) or 1)

    def _level(self, key: int) -> _Level:
        level = self._levels.get(key)
        if level is None:
            level = self._levels[key] = _Level(self._policies.get(key, self._default_policy))
            bisect.insort(self._order, key)
        return level

    def _drop_if_empty(self, key: int) -> None:
        level = self._levels.get(key)
        if level is not None and not len(level):
            del self._levels[key]
            self._order.remove(key)

    def __len__(self) -> int:
        return self._size

    def level_of(self, request: InferRequest) -> int:
        priority = request.priority
        return priority if 1 <= priority <= self._count else self._default

    def push(self, request: InferRequest, now_ns: int) -> int:
        """Queue ``request``; return its timeout deadline (ns, 0: none). Raises
        UnavailableError when its level is full."""
        key = self.level_of(request)
        policy = self._policies.get(key, self._default_policy)
        level = self._levels.get(key)
        if policy.max_queue_size and level is not None and len(level) >= policy.max_queue_size:
            raise UnavailableError("Exceeds maximum queue size")
        level = self._level(key)
        timeout_us = policy.timeout_us(request)
        deadline = now_ns + timeout_us * 1_000 if timeout_us else 0
        level.pending.append((request, deadline))
        self._size += 1
        return deadline

    def remove(self, request: InferRequest) -> bool:
        """Take ``request`` out wherever it is (a cancel); False if it is not queued."""
        key = self.level_of(request)
        level = self._levels.get(key)
        if level is None:
            return False
        for index, (queued, _) in enumerate(level.pending):
            if queued is request:
                del level.pending[index]
                break
        else:
            try:
                level.delayed.remove(request)
            except ValueError:
                return False
        self._size -= 1
        self._drop_if_empty(key)
        return True

    def expire(self, now_ns: int) -> list[InferRequest]:
        """Apply timeouts: return the rejected requests (removed); delay the others."""
        rejected: list[InferRequest] = []
        for key, level in list(self._levels.items()):
            if not level.pending:
                continue
            kept: deque[tuple[InferRequest, int]] = deque()
            for request, deadline in level.pending:
                if deadline and deadline <= now_ns:
                    if level.policy.reject_on_timeout:
                        rejected.append(request)
                        self._size -= 1
                    else:
                        level.delayed.append(request)
                else:
                    kept.append((request, deadline))
            level.pending = kept
            self._drop_if_empty(key)
        return rejected

    def next_deadline(self) -> int | None:
        """The earliest pending timeout, or None."""
        deadlines = [d for level in self._levels.values() for _, d in level.pending if d]
        return min(deadlines) if deadlines else None

    def is_last(self, request: InferRequest) -> bool:
        """Whether ``request`` is the last one in scheduling order."""
        key = self.level_of(request)
        level = self._levels[key]
        if level.delayed or not level.pending or level.pending[-1][0] is not request:
            return False
        return not any(self._levels[later] for later in self._order if later > key)

    def __iter__(self) -> Iterator[InferRequest]:
        """Requests in scheduling order: levels by priority, each level's pending requests
        before its delayed ones (Triton's PolicyQueue::At)."""
        for key in self._order:
            level = self._levels[key]
            for request, _ in level.pending:
                yield request
            yield from level.delayed

    def take(self, requests: list[InferRequest]) -> None:
        """Remove ``requests``, which must be the first ones in scheduling order."""
        order = list(self._order)
        levels = [self._levels[key] for key in order]
        for request in requests:
            for level in levels:
                if level.pending:
                    if level.pending[0][0] is not request:
                        raise RuntimeError("requests must be taken in scheduling order")
                    level.pending.popleft()
                    break
                if level.delayed:
                    if level.delayed[0] is not request:
                        raise RuntimeError("requests must be taken in scheduling order")
                    level.delayed.popleft()
                    break
            else:
                raise RuntimeError("requests must be taken in scheduling order")
            self._size -= 1
        for key in order:
            self._drop_if_empty(key)
