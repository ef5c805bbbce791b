"""The single source of a model version's counts and durations (nanoseconds).

Threads: every backend thread of the model records executions and finished requests;
callers (frontends, the API) read snapshots. ``ModelStats._lock`` guards all counters; a
record is a handful of integer additions under it, a snapshot copies them out.

Figures follow Triton's statistics extension: ``inference_count`` counts inferences
(batch elements), ``execution_count`` counts backend executions, and each duration is
cumulative over requests (a request in a batch of four adds the batch's compute time once
for itself). Failures also count by Triton's metric reasons (REJECTED, CANCELED, BACKEND,
OTHER), for ``nv_inference_request_failure``.

Response cache figures follow Triton too: a hit counts as a success (and a queue entry
of zero) with its lookup time as ``cache_hit``, and adds nothing to ``inference_count``,
``execution_count``, the compute durations or the batch statistics; a miss counts once
at lookup as ``cache_miss``, whose duration grows by the insertion of the response.

Two optional parts exist only when the metrics configuration asks for them, so the hot
path pays nothing otherwise: sliding windows of per-request latencies (the quantiles of
``summary_latencies``, including the cache's hit and miss durations) and a
first-response histogram for decoupled models (``histogram_latencies``). Both are
written under the same lock as the counters.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .request import InferRequest

__all__ = ["BatchStatistics", "Duration", "FailureCounts", "HistogramSnapshot",
           "LatencyWindow", "MemoryUsage", "ModelStatistics", "ModelStats",
           "ResponseStatistics"]

# Triton's failure reasons (the ``reason`` label of nv_inference_request_failure).
REJECTED = "REJECTED"  # refused on entry, full queue, queue timeout
CANCELED = "CANCELED"  # cancelled before execution
BACKEND = "BACKEND"  # failed during execution
OTHER = "OTHER"  # anything else (ensembles report only this, as Triton's do)
FAILURE_REASONS = (REJECTED, CANCELED, BACKEND, OTHER)


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
class FailureCounts:
    """Failed requests by Triton's failure reason."""

    rejected: int = 0
    canceled: int = 0
    backend: int = 0
    other: int = 0

    def by_reason(self) -> dict[str, int]:
        return {REJECTED: self.rejected, CANCELED: self.canceled, BACKEND: self.backend,
                OTHER: self.other}


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Memory a backend reports for a model version (Triton's memory_usage entries)."""

    type: str  # "CPU", "CPU_PINNED", "GPU"
    id: int
    byte_size: int

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id, "byte_size": self.byte_size}


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Cumulative bucket counts (one per upper bound, then +Inf), count and sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    count: int
    sum: float


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
    # failures by reason; infercore's own figure (Triton reports it as a metric label)
    fail_reasons: FailureCounts = FailureCounts()
    # what the backend reported (none of the built-in CPU backends reports any)
    memory_usage: tuple[MemoryUsage, ...] = ()

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
            "memory_usage": [m.to_dict() for m in self.memory_usage],
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


class LatencyWindow:
    """Per-request latencies of the last ``max_age_ns``, for summary quantiles.

    Triton's summaries (prometheus-cpp) cover a 60 s sliding window. Here the window also
    keeps at most ``max_samples`` requests (the most recent), so recording is one tuple
    append and a scrape sorts a bounded list; quantiles are exact over what is kept. Not
    locked: ModelStats writes and reads it under its own lock. ``series`` names the
    values each sample holds (by default the five request latencies).
    """

    SERIES = ("request", "queue", "compute_input", "compute_infer", "compute_output")

    def __init__(self, max_age_ns: int = 60_000_000_000, max_samples: int = 2048,
                 series: Sequence[str] = SERIES) -> None:
        self.max_age_ns = max_age_ns
        self.max_samples = max_samples
        self.series = tuple(series)
        # (monotonic ns, one value per series in ns)
        self._samples: deque[tuple[int, ...]] = deque(maxlen=max_samples)

    def add(self, now_ns: int, *values_ns: int) -> None:
        """One sample: for the default series, request, queue, compute input, compute
        infer and compute output durations."""
        self._samples.append((now_ns, *values_ns))

    def quantiles(self, now_ns: int, qs: Sequence[float]) -> dict[str, list[float]]:
        """Series name -> the value (us) at each quantile (NaN when the window is empty)."""
        samples = self._samples
        horizon = now_ns - self.max_age_ns
        while samples and samples[0][0] < horizon:
            samples.popleft()
        result: dict[str, list[float]] = {}
        for column, series in enumerate(self.series, start=1):
            values = sorted(sample[column] for sample in samples)
            result[series] = [_quantile(values, q) / 1e3 for q in qs]
        return result


def _quantile(values: list[int], q: float) -> float:
    """Nearest-rank quantile of sorted ``values``."""
    if not values:
        return float("nan")  # what prometheus-cpp reports for an empty window
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


class _Histogram:
    """Bucket counts for one histogram series; written under ModelStats' lock."""

    __slots__ = ("bounds", "counts", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def snapshot(self) -> HistogramSnapshot:
        cumulative, total = [], 0
        for count in self.counts:
            total += count
            cumulative.append(total)
        return HistogramSnapshot(self.bounds, tuple(cumulative), self.count, self.sum)


class ModelStats:
    """Accumulates one model version's statistics; safe to record from any thread.

    ``latency_window`` keeps per-request latencies for summaries; ``first_response_buckets``
    (ms) enables the first-response histogram. Both default to off.
    """

    def __init__(self, name: str, version: int, *, latency_window: LatencyWindow | None = None,
                 first_response_buckets: Sequence[float] | None = None) -> None:
        self.name = name
        self.version = version
        self._window = latency_window
        # Summaries of the cache's hit and miss durations go with the request summaries.
        self._cache_window = (None if latency_window is None else LatencyWindow(
            latency_window.max_age_ns, latency_window.max_samples, series=("cache_hit",)))
        self._cache_miss_window = (None if latency_window is None else LatencyWindow(
            latency_window.max_age_ns, latency_window.max_samples, series=("cache_miss",)))
        self._first_response = (None if first_response_buckets is None
                                else _Histogram(first_response_buckets))
        self._fail_reasons = dict.fromkeys(FAILURE_REASONS, 0)
        self._memory_usage: tuple[MemoryUsage, ...] = ()
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
        self._cache_hit = _Counter()
        self._cache_miss = _Counter()
        self._batches: dict[int, tuple[_Counter, _Counter, _Counter]] = {}
        self._instance_executions: dict[str, int] = {}
        # index -> [compute_infer, compute_output, success, fail, empty, cancel]
        self._responses: dict[int, list[_Counter]] = {}

    def record_execution(self, requests: list[InferRequest], now_ns: int,
                         instance: str = "") -> None:
        """Record one backend execution of ``requests`` and each request's outcome.

        Timestamps are read from the requests (all of one execution share the compute
        ones). A request counts as failed (reason BACKEND) when an error response was sent
        for it. A traced request is told its execution is recorded (its trace may end).
        """
        first = requests[0]
        input_ns = first.compute_input_end_ns - first.compute_start_ns
        infer_ns = first.compute_output_start_ns - first.compute_input_end_ns
        output_ns = first.compute_end_ns - first.compute_output_start_ns
        batch_size = executed_rows = 0
        window = self._window
        traced = False
        # The batch's successes are summed here and added once: no call per request.
        succeeded = success_ns = queue_total_ns = 0
        with self._lock:
            self._execution_count += 1
            if instance:
                self._instance_executions[instance] = (
                    self._instance_executions.get(instance, 0) + 1)
            self._last_inference_ms = time.time_ns() // 1_000_000
            for request in requests:
                if request.padding:  # in the batch's size only (Triton's null requests)
                    executed_rows += request.batch_size or 1
                    continue
                if request.trace is not None:
                    traced = True
                executed_rows += request.batch_size or 1
                sender = request.sender
                if sender is not None and sender.failed:
                    self._fail.add(now_ns - request.request_start_ns)
                    self._fail_reasons[BACKEND] += 1
                    continue
                batch_size += request.batch_size or 1
                request_ns = now_ns - request.request_start_ns
                queue_ns = request.compute_start_ns - request.queue_start_ns
                succeeded += 1
                success_ns += request_ns
                queue_total_ns += queue_ns
                if window is not None:
                    window.add(now_ns, request_ns, queue_ns, input_ns, infer_ns, output_ns)
            if succeeded:
                self._success.add(success_ns, succeeded)
                self._queue.add(queue_total_ns, succeeded)
                self._compute_input.add(input_ns * succeeded, succeeded)
                self._compute_infer.add(infer_ns * succeeded, succeeded)
                self._compute_output.add(output_ns * succeeded, succeeded)
            self._inference_count += batch_size
            # batch_stats count the execution whatever its requests' outcomes, as Triton's
            # Python backend reports it (a failed execute too; its onnxruntime backend
            # skips a batch whose every response failed); inference_count only successes
            self._add_batch(executed_rows, input_ns, infer_ns, output_ns)
        if traced:  # outside the lock: ending a trace may write it out
            for request in requests:
                if request.trace is not None:
                    request.trace.settled()

    def _add_batch(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
                   ) -> None:
        """One execution of ``batch_size`` in batch_stats (the lock held)."""
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

    def record_success(self, request: InferRequest, now_ns: int, *, queue_ns: int = 0,
                       input_ns: int = 0, infer_ns: int = 0, output_ns: int = 0) -> None:
        """A request answered without an execution of this model's own (an ensemble):
        as Triton's ensembles, one execution of the request's batch size whose queue and
        compute durations are its steps' (summed by the caller)."""
        request_ns = now_ns - request.request_start_ns
        batch_size = request.batch_size or 1
        with self._lock:
            self._last_inference_ms = time.time_ns() // 1_000_000
            self._inference_count += batch_size
            self._execution_count += 1
            self._success.add(request_ns)
            self._queue.add(queue_ns)
            self._compute_input.add(input_ns)
            self._compute_infer.add(infer_ns)
            self._compute_output.add(output_ns)
            self._add_batch(batch_size, input_ns, infer_ns, output_ns)
            if self._window is not None:
                self._window.add(now_ns, request_ns, queue_ns, input_ns, infer_ns, output_ns)

    def record_cache_hit(self, request: InferRequest, lookup_ns: int, now_ns: int) -> None:
        """A request answered from the response cache (Triton's UpdateSuccessCacheHit):
        a success, a queue entry of zero, and a cache hit of ``lookup_ns``; no inference,
        execution or compute figures."""
        with self._lock:
            self._success.add(now_ns - request.request_start_ns)
            self._queue.add(0)
            self._cache_hit.add(lookup_ns)
            if self._cache_window is not None:
                self._cache_window.add(now_ns, lookup_ns)

    def record_cache_miss(self, lookup_ns: int) -> None:
        """A lookup that found nothing; the request goes on to execute."""
        with self._lock:
            self._cache_miss.add(lookup_ns)

    def record_cache_insert(self, insert_ns: int, miss_ns: int, now_ns: int) -> None:
        """The response of a missed request was inserted: ``insert_ns`` joins the miss's
        duration; ``miss_ns`` (lookup and insertion) is that miss's summary sample."""
        with self._lock:
            self._cache_miss.ns += insert_ns
            if self._cache_miss_window is not None:
                self._cache_miss_window.add(now_ns, miss_ns)

    def record_failure(self, request: InferRequest, now_ns: int, reason: str = OTHER) -> None:
        """A request that failed before execution (validation, queue timeout, cancel);
        ``reason`` is one of Triton's failure reasons."""
        with self._lock:
            self._fail.add(now_ns - request.request_start_ns)
            self._fail_reasons[reason] += 1

    def observe_first_response(self, ms: float) -> None:
        """Time from a decoupled request's start to its first response (histogram on)."""
        histogram = self._first_response
        if histogram is not None:
            with self._lock:
                histogram.observe(ms)

    @property
    def observes_first_response(self) -> bool:
        return self._first_response is not None

    def first_response_histogram(self) -> HistogramSnapshot | None:
        if self._first_response is None:
            return None
        with self._lock:
            return self._first_response.snapshot()

    def latency_quantiles(self, now_ns: int, qs: Sequence[float]
                          ) -> dict[str, list[float]] | None:
        """Summary quantiles (us) per series over the window; None when summaries are off."""
        if self._window is None:
            return None
        with self._lock:
            return self._window.quantiles(now_ns, qs)

    def cache_latency_quantiles(self, now_ns: int, qs: Sequence[float]
                                ) -> dict[str, list[float]] | None:
        """Summary quantiles (us) of the cache's hit and miss durations ("cache_hit",
        "cache_miss"); None when summaries are off."""
        if self._cache_window is None or self._cache_miss_window is None:
            return None
        with self._lock:
            return {**self._cache_window.quantiles(now_ns, qs),
                    **self._cache_miss_window.quantiles(now_ns, qs)}

    def report_memory_usage(self, usage: Sequence[MemoryUsage]) -> None:
        """What a backend reports its model version holds (TRITONBACKEND's
        ModelReportMemoryUsage); shown in the statistics' memory_usage."""
        with self._lock:
            self._memory_usage = tuple(usage)

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
                cache_hit=self._cache_hit.freeze(),
                cache_miss=self._cache_miss.freeze(),
                batch_stats=batches,
                instance_executions=dict(sorted(self._instance_executions.items())),
                response_stats={index: ResponseStatistics(*(c.freeze() for c in counters))
                                for index, counters in self._responses.items()},
                fail_reasons=FailureCounts(*(self._fail_reasons[r] for r in FAILURE_REASONS)),
                memory_usage=self._memory_usage,
            )
