"""DefaultScheduler: FIFO, one payload per request, cancel while queued, stop and drain."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest

from infercore.errors import CancelledError, UnavailableError
from infercore.payload import Payload
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.scheduling.default import DefaultScheduler

WAIT_S = 5.0


class _Clock:
    """A manual monotonic clock: each reading is 100 ns after the previous one."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1_000, 100)

    def __call__(self) -> int:
        return next(self._ticks)


def _scheduler(
    instance_count: int = 1,
) -> tuple[DefaultScheduler, list[InferRequest]]:
    failed: list[InferRequest] = []
    scheduler = DefaultScheduler("m", instance_count, _Clock(), failed.append)
    return scheduler, failed


def _request(name: str, batch_size: int = 0) -> tuple[InferRequest, ResponseStream]:
    request = InferRequest("m", {}, id=name)
    request.batch_size = batch_size
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, "m", 1)
    return request, stream


def _start(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name)
    thread.start()
    return thread


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"{thread.name} is still blocked"


def test_requests_come_out_in_fifo_order_one_payload_each():
    scheduler, failed = _scheduler()
    requests = [_request(f"r{i}")[0] for i in range(5)]
    for request in requests:
        scheduler.enqueue(request)
    assert scheduler.queued_count() == 5
    payloads = [scheduler.next_payload() for _ in requests]
    assert all(isinstance(p, Payload) for p in payloads)
    assert [p.requests for p in payloads] == [[r] for r in requests]
    assert scheduler.queued_count() == 0
    assert failed == []


def test_payload_batch_size_follows_the_request():
    scheduler, _ = _scheduler()
    scheduler.enqueue(_request("a", batch_size=4)[0])
    scheduler.enqueue(_request("b", batch_size=0)[0])
    assert scheduler.next_payload().batch_size == 4
    assert scheduler.next_payload().batch_size == 1


def test_enqueue_stamps_queue_start_from_the_clock():
    scheduler, _ = _scheduler()
    first, _ = _request("a")
    second, _ = _request("b")
    scheduler.enqueue(first)
    scheduler.enqueue(second)
    assert first.queue_start_ns == 1_000
    assert second.queue_start_ns == 1_100


def test_payload_marks_use_the_scheduler_clock():
    scheduler, _ = _scheduler()
    scheduler.enqueue(_request("a")[0])  # clock reads 1_000
    payload = scheduler.next_payload()
    payload.mark_compute_input_end()
    payload.mark_compute_output_start()
    assert payload.compute_input_end_ns == 1_100
    assert payload.compute_output_start_ns == 1_200


def test_next_payload_blocks_until_a_request_is_enqueued():
    scheduler, _ = _scheduler()
    got: list[Payload | None] = []
    ready = threading.Event()

    def instance() -> None:
        ready.set()
        got.append(scheduler.next_payload())

    thread = _start(instance, "test-instance")
    assert ready.wait(WAIT_S)
    request, _ = _request("late")
    scheduler.enqueue(request)
    _join([thread])
    assert len(got) == 1 and got[0] is not None
    assert got[0].requests == [request]


def test_cancelled_queued_request_is_answered_and_skipped():
    scheduler, failed = _scheduler()
    cancelled, cancelled_stream = _request("gone")
    kept, kept_stream = _request("kept")
    scheduler.enqueue(cancelled)
    scheduler.enqueue(kept)
    cancelled.cancel()
    payload = scheduler.next_payload()
    assert payload is not None
    assert payload.requests == [kept]
    responses = list(cancelled_stream)
    assert len(responses) == 1
    assert isinstance(responses[0].error, CancelledError)
    assert str(responses[0].error) == "Request was cancelled"
    assert responses[0].final
    assert failed == [cancelled]
    assert not kept_stream.done


def test_a_cancel_after_the_final_response_is_not_answered_twice():
    scheduler, failed = _scheduler()
    request, stream = _request("a")
    scheduler.enqueue(request)
    request.sender.close()  # the final flag is out: cancelling has nothing left to do
    request.cancel()
    assert list(stream) == []
    assert failed == []


def test_stop_wakes_each_blocked_instance_thread_with_none():
    instances = 4
    scheduler, failed = _scheduler(instances)
    barrier = threading.Barrier(instances + 1)
    results: list[Payload | None] = []
    lock = threading.Lock()

    def instance() -> None:
        barrier.wait(WAIT_S)
        payload = scheduler.next_payload()
        with lock:
            results.append(payload)

    threads = [_start(instance, f"test-instance-{n}") for n in range(instances)]
    barrier.wait(WAIT_S)
    scheduler.stop()
    _join(threads)
    assert results == [None] * instances
    assert failed == []


def test_next_payload_after_stop_returns_none_without_blocking():
    scheduler, _ = _scheduler(2)
    scheduler.stop()
    assert scheduler.next_payload() is None
    assert scheduler.next_payload() is None


def test_requests_queued_before_stop_are_still_handed_out_before_none():
    scheduler, failed = _scheduler()
    request, _ = _request("a")
    scheduler.enqueue(request)
    scheduler.stop()
    assert scheduler.next_payload().requests == [request]
    assert scheduler.next_payload() is None
    assert failed == []


def test_queued_count_after_stop_counts_requests_only():
    scheduler, _ = _scheduler(instance_count=3)
    scheduler.enqueue(_request("a")[0])
    scheduler.stop()
    assert scheduler.queued_count() == 1


def test_enqueue_after_stop_raises_unavailable():
    scheduler, _ = _scheduler()
    scheduler.stop()
    with pytest.raises(UnavailableError) as info:
        scheduler.enqueue(_request("a")[0])
    assert str(info.value) == "model 'm' is not accepting requests"


def test_drain_answers_leftover_requests_with_unavailable():
    scheduler, failed = _scheduler(instance_count=2)
    first, first_stream = _request("a")
    second, second_stream = _request("b")
    scheduler.enqueue(first)
    scheduler.enqueue(second)
    scheduler.stop()
    scheduler.drain()
    for stream in (first_stream, second_stream):
        responses = list(stream)
        assert len(responses) == 1
        assert isinstance(responses[0].error, UnavailableError)
        assert str(responses[0].error) == ("model 'm' was unloaded before the request could run")
    assert failed == [first, second]
    assert scheduler.queued_count() == 0


def test_drain_of_an_empty_queue_does_nothing():
    scheduler, failed = _scheduler(3)
    scheduler.stop()
    scheduler.drain()
    assert failed == []
    assert scheduler.queued_count() == 0


def test_cancel_answers_a_queued_request_at_once_and_drain_skips_it():
    scheduler, failed = _scheduler()
    request, stream = _request("a")
    scheduler.enqueue(request)
    request.cancel()
    assert scheduler.queued_count() == 0
    responses = list(stream)
    assert len(responses) == 1
    assert isinstance(responses[0].error, CancelledError)
    scheduler.stop()
    scheduler.drain()
    assert failed == [request]


def test_on_failed_is_not_called_for_requests_handed_out():
    scheduler, failed = _scheduler()
    for i in range(3):
        scheduler.enqueue(_request(f"r{i}")[0])
    for _ in range(3):
        scheduler.next_payload()
    assert failed == []


def test_several_instance_threads_take_every_request_exactly_once():
    instances = 4
    total = 2000
    scheduler, failed = _scheduler(instances)
    taken: list[list[InferRequest]] = [[] for _ in range(instances)]

    def instance(index: int) -> Callable[[], None]:
        def run() -> None:
            while (payload := scheduler.next_payload()) is not None:
                assert len(payload.requests) == 1
                taken[index].extend(payload.requests)

        return run

    threads = [_start(instance(n), f"test-instance-{n}") for n in range(instances)]
    requests = [_request(f"r{i}")[0] for i in range(total)]
    for request in requests:
        scheduler.enqueue(request)
    scheduler.stop()
    _join(threads)
    all_taken = [r for per_instance in taken for r in per_instance]
    assert len(all_taken) == total
    assert {id(r) for r in all_taken} == {id(r) for r in requests}
    # each instance saw its share in FIFO order
    position = {id(r): i for i, r in enumerate(requests)}
    for per_instance in taken:
        order = [position[id(r)] for r in per_instance]
        assert order == sorted(order)
    assert failed == []


def test_a_request_timeout_is_not_a_queue_timeout_without_dynamic_batching():
    # Triton 2.51 hands such a request to its rate limiter, which never looks at its
    # timeout (benchmarks/qa_schedulers.py default_scheduler_timeout): it runs
    now = [1_000]
    failed: list[InferRequest] = []
    scheduler = DefaultScheduler("m", 1, lambda: now[0], failed.append)
    request = InferRequest("m", {}, id="late", timeout_us=1)
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, "m", 1)
    scheduler.enqueue(request)
    now[0] += 1_000_000  # a millisecond queued: far past its 1 us timeout
    assert scheduler.next_payload().requests == [request]
    assert failed == []
