"""The single source of a model version's counts and durations (nanoseconds).

Threads: every backend thread of the model records executions and finished requests;
callers (frontends, the API) read snapshots. ``ModelStats._lock`` guards all counters; a
record is a handful of integer additions under it, a snapshot copies them out.

Figures follow Triton's statistics extension: ``inference_count`` counts inferences
(batch elements), ``execution_count`` counts backend executions, and each duration is
cumulative over requests (a request in a batch of four adds the batch's compute time once
for itself).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .request import InferRequest

__all__ = ["BatchStatistics", "Duration", "ModelStatistics", "ModelStats",
           "ResponseStatistics"]


@dataclass(frozen=True, slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(frozen=True, slots=True)
class BatchStatistics:
    batch_size: int
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "compute_input": self.compute_input.to_dict(),
            "compute_infer": self.compute_infer.to_dict(),
            "compute_output": self.compute_output.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class ResponseStatistics:
    """Figures for the n-th response of decoupled requests (Triton's response_stats)."""

    compute_infer: Duration = Duration()
    compute_output: Duration = Duration()
    success: Duration = Duration()
    fail: Duration = Duration()
    empty_response: Duration = Duration()
    cancel: Duration = Duration()

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_infer": self.compute_infer.to_dict(),
            "compute_output": self.compute_output.to_dict(),
            "success": self.success.to_dict(),
            "fail": self.fail.to_dict(),
            "empty_response": self.empty_response.to_dict(),
            "cancel": self.cancel.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class ModelStatistics:
    """A snapshot of one model version's statistics, in Triton's terms."""

    name: str
    version: int
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = Duration()
    fail: Duration = Duration()
    queue: Duration = Duration()
    compute_input: Duration = Duration()
    compute_infer: Duration = Duration()
    compute_output: Duration = Duration()
    cache_hit: Duration = Duration()
    cache_miss: Duration = Duration()
    batch_stats: tuple[BatchStatistics, ...] = field(default_factory=tuple)
    # executions per instance name; infercore's own figure (not in Triton's JSON)
    instance_executions: dict[str, int] = field(default_factory=dict)
    # response index -> figures, for decoupled models
    response_stats: dict[int, ResponseStatistics] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Triton's statistics JSON for one model version."""
        return {
            "name": self.name,
            "version": str(self.version),
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_dict(),
                "fail": self.fail.to_dict(),
                "queue": self.queue.to_dict(),
                "compute_input": self.compute_input.to_dict(),
                "compute_infer": self.compute_infer.to_dict(),
                "compute_output": self.compute_output.to_dict(),
                "cache_hit": self.cache_hit.to_dict(),
                "cache_miss": self.cache_miss.to_dict(),
            },
            "response_stats": {str(index): stats.to_dict()
                               for index, stats in sorted(self.response_stats.items())},
            "batch_stats": [b.to_dict() for b in self.batch_stats],
            "memory_usage": [],
        }


class _Counter:
    __slots__ = ("count", "ns")

    def __init__(self) -> None:
        self.count = 0
        self.ns = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def freeze(self) -> Duration:
        return Duration(self.count, self.ns)


class ModelStats:
    """Accumulates one model version's statistics; safe to record from any thread."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self._last_inference_ms = 0
        self._inference_count = 0
        self._execution_count = 0
        self._success = _Counter()
        self._fail = _Counter()
        self._queue = _Counter()
        self._compute_input = _Counter()
        self._compute_infer = _Counter()
        self._compute_output = _Counter()
        self._batches: dict[int, tuple[_Counter, _Counter, _Counter]] = {}
        self._instance_executions: dict[str, int] = {}
        # index -> [compute_infer, compute_output, success, fail, empty, cancel]
        self._responses: dict[int, list[_Counter]] = {}

    def record_execution(self, requests: list[InferRequest], now_ns: int,
                         instance: str = "") -> None:
        """Record one backend execution of ``requests`` and each request's outcome.

        Timestamps are read from the requests (all of one execution share the compute
        ones). A request counts as failed when an error response was sent for it.
        """
        first = requests[0]
        input_ns = first.compute_input_end_ns - first.compute_start_ns
        infer_ns = first.compute_output_start_ns - first.compute_input_end_ns
        output_ns = first.compute_end_ns - first.compute_output_start_ns
        batch_size = 0
        with self._lock:
            self._execution_count += 1
            if instance:
                self._instance_executions[instance] = (
                    self._instance_executions.get(instance, 0) + 1)
            self._last_inference_ms = time.time_ns() // 1_000_000
            for request in requests:
                sender = request.sender
                if sender is not None and sender.failed:
                    self._fail.add(now_ns - request.request_start_ns)
                    continue
                batch_size += request.batch_size or 1
                self._success.add(now_ns - request.request_start_ns)
                self._queue.add(request.compute_start_ns - request.queue_start_ns)
                self._compute_input.add(input_ns)
                self._compute_infer.add(infer_ns)
                self._compute_output.add(output_ns)
            self._inference_count += batch_size
            if batch_size:
                counters = self._batches.get(batch_size)
                if counters is None:
                    counters = self._batches[batch_size] = (_Counter(), _Counter(), _Counter())
                counters[0].add(input_ns)
                counters[1].add(infer_ns)
                counters[2].add(output_ns)

    def record_response(self, index: int, infer_ns: int, output_ns: int, kind: str) -> None:
        """One response of a decoupled request: ``kind`` is "success", "fail", "empty"
        (a bare final flag) or "cancel"; ``infer_ns`` is the time since the previous
        response (or the execution's start), ``output_ns`` the time spent sending it."""
        slot = {"success": 2, "fail": 3, "empty": 4, "cancel": 5}[kind]
        with self._lock:
            counters = self._responses.get(index)
            if counters is None:
                counters = self._responses[index] = [_Counter() for _ in range(6)]
            counters[0].add(infer_ns)
            counters[1].add(output_ns)
            counters[slot].add(infer_ns + output_ns)

    def record_success(self, request: InferRequest, now_ns: int) -> None:
        """A request answered without an execution of this model's own (an ensemble)."""
        with self._lock:
            self._last_inference_ms = time.time_ns() // 1_000_000
            self._inference_count += request.batch_size or 1
            self._execution_count += 1
            self._success.add(now_ns - request.request_start_ns)

    def record_failure(self, request: InferRequest, now_ns: int) -> None:
        """A request that failed before execution (validation, queue timeout, cancel)."""
        with self._lock:
            self._fail.add(now_ns - request.request_start_ns)

    def snapshot(self) -> ModelStatistics:
        with self._lock:
            batches = tuple(
                BatchStatistics(size, c[0].freeze(), c[1].freeze(), c[2].freeze())
                for size, c in sorted(self._batches.items())
            )
            return ModelStatistics(
                name=self.name,
                version=self.version,
                last_inference_ms=self._last_inference_ms,
                inference_count=self._inference_count,
                execution_count=self._execution_count,
                success=self._success.freeze(),
                fail=self._fail.freeze(),
                queue=self._queue.freeze(),
                compute_input=self._compute_input.freeze(),
                compute_infer=self._compute_infer.freeze(),
                compute_output=self._compute_output.freeze(),
                batch_stats=batches,
                instance_executions=dict(sorted(self._instance_executions.items())),
                response_stats={index: ResponseStatistics(*(c.freeze() for c in counters))
                                for index, counters in self._responses.items()},
            )
