"""ModelStats: exact counts and nanosecond sums from hand-set request timestamps."""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace

from infercore.request import InferRequest
from infercore.stats import (
    BatchStatistics,
    Duration,
    LatencyWindow,
    ModelStatistics,
    ModelStats,
)


def _request(
    *,
    start: int = 1_000,
    queue: int = 1_100,
    compute: int = 1_300,
    input_end: int = 1_350,
    output_start: int = 1_750,
    end: int = 1_800,
    batch_size: int = 1,
    failed: bool | None = False,
) -> InferRequest:
    """A request whose timestamps are set by hand; ``failed=None`` means no sender."""
    request = InferRequest("m", {})
    request.request_start_ns = start
    request.queue_start_ns = queue
    request.compute_start_ns = compute
    request.compute_input_end_ns = input_end
    request.compute_output_start_ns = output_start
    request.compute_end_ns = end
    request.batch_size = batch_size
    request.sender = None if failed is None else SimpleNamespace(failed=failed)  # type: ignore[assignment]
    return request


def test_new_stats_snapshot_is_all_zero():
    snap = ModelStats("m", 2).snapshot()
    assert snap == ModelStatistics(name="m", version=2)
    assert snap.inference_count == 0
    assert snap.execution_count == 0
    assert snap.last_inference_ms == 0
    assert snap.success == Duration(0, 0)
    assert snap.batch_stats == ()


def test_one_successful_execution_records_exact_durations():
    stats = ModelStats("m", 1)
    stats.record_execution([_request()], now_ns=2_000)
    snap = stats.snapshot()
    assert snap.execution_count == 1
    assert snap.inference_count == 1
    assert snap.success == Duration(1, 2_000 - 1_000)
    assert snap.fail == Duration(0, 0)
    assert snap.queue == Duration(1, 1_300 - 1_100)
    assert snap.compute_input == Duration(1, 1_350 - 1_300)
    assert snap.compute_infer == Duration(1, 1_750 - 1_350)
    assert snap.compute_output == Duration(1, 1_800 - 1_750)
    assert snap.cache_hit == Duration(0, 0)
    assert snap.cache_miss == Duration(0, 0)
    assert snap.batch_stats == (
        BatchStatistics(1, Duration(1, 50), Duration(1, 400), Duration(1, 50)),
    )


def test_request_without_sender_counts_as_success():
    stats = ModelStats("m", 1)
    stats.record_execution([_request(failed=None)], now_ns=2_000)
    snap = stats.snapshot()
    assert snap.success == Duration(1, 1_000)
    assert snap.fail == Duration(0, 0)


def test_batched_execution_counts_inferences_and_adds_compute_per_request():
    stats = ModelStats("m", 1)
    requests = [
        _request(start=100, queue=200, batch_size=2),
        _request(start=500, queue=600, batch_size=3),
    ]
    stats.record_execution(requests, now_ns=2_000)
    snap = stats.snapshot()
    assert snap.execution_count == 1
    assert snap.inference_count == 5
    assert snap.success == Duration(2, (2_000 - 100) + (2_000 - 500))
    assert snap.queue == Duration(2, (1_300 - 200) + (1_300 - 600))
    # the batch's compute time is added once for each request in it
    assert snap.compute_input == Duration(2, 2 * 50)
    assert snap.compute_infer == Duration(2, 2 * 400)
    assert snap.compute_output == Duration(2, 2 * 50)
    # one execution of batch size 5, counted once
    assert snap.batch_stats == (
        BatchStatistics(5, Duration(1, 50), Duration(1, 400), Duration(1, 50)),
    )


def test_compute_durations_come_from_the_first_request_of_the_execution():
    stats = ModelStats("m", 1)
    first = _request(compute=1_000, input_end=1_010, output_start=1_110, end=1_111)
    second = _request(compute=5_000, input_end=6_000, output_start=7_000, end=8_000)
    stats.record_execution([first, second], now_ns=9_000)
    snap = stats.snapshot()
    assert snap.compute_input == Duration(2, 20)
    assert snap.compute_infer == Duration(2, 200)
    assert snap.compute_output == Duration(2, 2)


def test_request_batch_size_zero_counts_as_one_inference():
    stats = ModelStats("m", 1)
    stats.record_execution([_request(batch_size=0)], now_ns=2_000)
    snap = stats.snapshot()
    assert snap.inference_count == 1
    assert [b.batch_size for b in snap.batch_stats] == [1]


def test_failed_request_in_execution_counts_as_fail_only():
    stats = ModelStats("m", 1)
    stats.record_execution(
        [_request(start=100, failed=True, batch_size=4), _request(start=400, batch_size=2)],
        now_ns=1_000,
    )
    snap = stats.snapshot()
    assert snap.execution_count == 1
    assert snap.inference_count == 2
    assert snap.fail == Duration(1, 900)
    assert snap.success == Duration(1, 600)
    assert snap.queue == Duration(1, 200)
    assert snap.compute_input == Duration(1, 50)
    # the execution ran 6 rows: batch_stats count them all (Triton 2.51, recorded:
    # statistics::after_execute_raises), inference_count only the successful ones
    assert [b.batch_size for b in snap.batch_stats] == [6]


def test_execution_where_every_request_failed_adds_no_inference_but_its_batch():
    stats = ModelStats("m", 1)
    stats.record_execution([_request(start=0, failed=True)], now_ns=700)
    snap = stats.snapshot()
    assert snap.execution_count == 1
    assert snap.inference_count == 0
    assert snap.fail == Duration(1, 700)
    assert snap.success == Duration(0, 0)
    assert snap.queue == Duration(0, 0)
    assert snap.compute_infer == Duration(0, 0)
    assert [(b.batch_size, b.compute_infer.count) for b in snap.batch_stats] == [(1, 1)]


def test_record_failure_adds_fail_duration_only():
    stats = ModelStats("m", 1)
    stats.record_failure(_request(start=250), now_ns=1_000)
    stats.record_failure(_request(start=500), now_ns=1_000)
    snap = stats.snapshot()
    assert snap.fail == Duration(2, 750 + 500)
    assert snap.execution_count == 0
    assert snap.inference_count == 0
    assert snap.success == Duration(0, 0)
    assert snap.queue == Duration(0, 0)
    assert snap.last_inference_ms == 0


def test_batch_stats_are_keyed_by_batch_size_and_sorted():
    stats = ModelStats("m", 1)
    stats.record_execution([_request(batch_size=4)], now_ns=2_000)
    stats.record_execution([_request(batch_size=1)], now_ns=2_000)
    stats.record_execution(
        [_request(batch_size=2, compute=0, input_end=10, output_start=30, end=60)],
        now_ns=2_000,
    )
    stats.record_execution([_request(batch_size=4)], now_ns=2_000)
    stats.record_execution([_request(batch_size=1), _request(batch_size=1)], now_ns=2_000)
    snap = stats.snapshot()
    assert snap.execution_count == 5
    assert snap.inference_count == 4 + 1 + 2 + 4 + 2
    assert snap.batch_stats == (
        BatchStatistics(1, Duration(1, 50), Duration(1, 400), Duration(1, 50)),
        BatchStatistics(2, Duration(2, 10 + 50), Duration(2, 20 + 400), Duration(2, 30 + 50)),
        BatchStatistics(4, Duration(2, 100), Duration(2, 800), Duration(2, 100)),
    )


def test_last_inference_is_wall_clock_milliseconds_of_the_latest_execution():
    stats = ModelStats("m", 1)
    before = time.time_ns() // 1_000_000
    stats.record_execution([_request()], now_ns=2_000)
    after = time.time_ns() // 1_000_000
    assert before <= stats.snapshot().last_inference_ms <= after


def test_snapshot_is_a_frozen_copy():
    stats = ModelStats("m", 1)
    stats.record_execution([_request()], now_ns=2_000)
    first = stats.snapshot()
    stats.record_execution([_request()], now_ns=2_000)
    assert first.execution_count == 1
    assert stats.snapshot().execution_count == 2


def test_to_dict_has_tritons_statistics_keys():
    stats = ModelStats("add_sub", 3)
    stats.record_execution([_request(batch_size=2)], now_ns=2_000)
    stats.record_failure(_request(start=1_500), now_ns=2_000)
    data = stats.snapshot().to_dict()
    assert set(data) == {
        "name",
        "version",
        "last_inference",
        "inference_count",
        "execution_count",
        "inference_stats",
        "response_stats",
        "batch_stats",
        "memory_usage",
    }
    assert data["name"] == "add_sub"
    assert data["version"] == "3"
    assert isinstance(data["last_inference"], int) and data["last_inference"] > 0
    assert data["inference_count"] == 2
    assert data["execution_count"] == 1
    assert data["inference_stats"] == {
        "success": {"count": 1, "ns": 1_000},
        "fail": {"count": 1, "ns": 500},
        "queue": {"count": 1, "ns": 200},
        "compute_input": {"count": 1, "ns": 50},
        "compute_infer": {"count": 1, "ns": 400},
        "compute_output": {"count": 1, "ns": 50},
        "cache_hit": {"count": 0, "ns": 0},
        "cache_miss": {"count": 0, "ns": 0},
    }
    assert data["response_stats"] == {}
    assert data["batch_stats"] == [
        {
            "batch_size": 2,
            "compute_input": {"count": 1, "ns": 50},
            "compute_infer": {"count": 1, "ns": 400},
            "compute_output": {"count": 1, "ns": 50},
        }
    ]
    assert data["memory_usage"] == []


def test_to_dict_of_empty_stats():
    data = ModelStats("m", 1).snapshot().to_dict()
    assert data["version"] == "1"
    assert data["last_inference"] == 0
    assert data["batch_stats"] == []
    assert all(v == {"count": 0, "ns": 0} for v in data["inference_stats"].values())


def test_concurrent_recording_from_several_threads_gives_exact_totals():
    stats = ModelStats("m", 1)
    thread_count = 8
    per_thread = 500
    barrier = threading.Barrier(thread_count)
    errors: list[BaseException] = []

    def record(index: int) -> None:
        try:
            barrier.wait(5)
            for i in range(per_thread):
                if i % 5 == 4:
                    stats.record_failure(_request(start=0), now_ns=7)
                else:
                    batch = 1 + (i + index) % 2
                    stats.record_execution([_request(batch_size=batch)], now_ns=2_000)
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=record, args=(n,), name=f"test-stats-{n}")
        for n in range(thread_count)
    ]
    # Switch threads as often as possible so an unguarded read-modify-write would lose updates.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(10)
            assert not worker.is_alive()
    finally:
        sys.setswitchinterval(interval)
    assert not errors

    failures = thread_count * (per_thread // 5)
    executions = thread_count * per_thread - failures
    snap = stats.snapshot()
    assert snap.execution_count == executions
    assert snap.fail == Duration(failures, failures * 7)
    assert snap.success == Duration(executions, executions * 1_000)
    assert snap.queue == Duration(executions, executions * 200)
    assert snap.compute_infer == Duration(executions, executions * 400)
    by_size = {b.batch_size: b.compute_infer.count for b in snap.batch_stats}
    assert sum(by_size.values()) == executions
    assert snap.inference_count == by_size[1] * 1 + by_size[2] * 2
    # each thread's successes alternate batch sizes 1 and 2 by (i + index) parity
    expected_twos = sum(
        1 for n in range(thread_count) for i in range(per_thread) if i % 5 != 4 and (i + n) % 2 == 1
    )
    assert by_size[2] == expected_twos
    assert by_size[1] == executions - expected_twos


def test_cache_hits_and_misses_count_as_triton_counts_them():
    stats = ModelStats("m", 1, latency_window=LatencyWindow())
    stats.record_cache_miss(300)  # looked up, then executed
    stats.record_execution([_request()], now_ns=2_000)
    stats.record_cache_insert(200, 500, now_ns=2_100)
    stats.record_cache_hit(_request(start=5_000), 40, now_ns=5_100)
    snap = stats.snapshot()
    assert snap.success == Duration(2, (2_000 - 1_000) + (5_100 - 5_000))
    assert snap.queue == Duration(2, 1_300 - 1_100)  # a hit queues for 0 ns
    assert snap.compute_infer == Duration(1, 400)  # hits never compute
    assert (snap.inference_count, snap.execution_count) == (1, 1)
    assert snap.cache_hit == Duration(1, 40)
    assert snap.cache_miss == Duration(1, 300 + 200)
    assert snap.to_dict()["inference_stats"]["cache_miss"] == {"count": 1, "ns": 500}
    quantiles = stats.cache_latency_quantiles(6_000, [0.5])
    assert quantiles == {"cache_hit": [0.04], "cache_miss": [0.5]}
    assert ModelStats("m", 1).cache_latency_quantiles(6_000, [0.5]) is None
