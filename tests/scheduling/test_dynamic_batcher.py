"""DynamicBatcher: batch formation, delays, priorities, queue policies, ordering, cancel.

Time is a ManualClock: delays and timeouts pass only when a test advances it, and threads
are synchronised on the clock's parked-thread count, never on sleeps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.errors import CancelledError, UnavailableError
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.scheduling.dynamic import DynamicBatcher
from infercore.tensor import Tensor
from infercore.testing import ManualClock

BASE = """
name: "m"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""


def _batcher(extra: str, clock: ManualClock | None = None, instances: int = 1):
    config = text_format.Parse(BASE + extra, model_config_pb2.ModelConfig())
    failed: list[InferRequest] = []
    clock = clock or ManualClock()
    return DynamicBatcher(config, instances, clock, failed.append), clock, failed


def _request(name: str, batch: int = 1, width: int = 4, priority: int = 0,
             timeout_us: int = 0) -> tuple[InferRequest, ResponseStream]:
    x = Tensor.from_numpy(np.zeros((batch, width), np.float32))
    request = InferRequest("m", {"X": x}, id=name, priority=priority, timeout_us=timeout_us)
    request.batch_size = batch
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, "m", 1)
    return request, stream


def _ids(payload) -> list[str]:
    return [r.id for r in payload.requests]


def _next_in_thread(batcher) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(batcher.next_payload()))
    thread.start()
    return thread, got


def test_without_delay_everything_queued_goes_at_once():
    batcher, _, _ = _batcher("dynamic_batching { }")
    for name in "abc":
        batcher.enqueue(_request(name)[0])
    assert _ids(batcher.next_payload()) == ["a", "b", "c"]


def test_batch_never_exceeds_max_batch_size():
    batcher, _, _ = _batcher("dynamic_batching { }")
    for name, size in zip("abc", (3, 4, 2), strict=True):
        batcher.enqueue(_request(name, batch=size)[0])
    first = batcher.next_payload()
    assert _ids(first) == ["a", "b"] and first.batch_size == 7
    assert _ids(batcher.next_payload()) == ["c"]


def test_delay_holds_a_small_batch_until_it_expires():
    batcher, clock, _ = _batcher("dynamic_batching { max_queue_delay_microseconds: 100 }")
    batcher.enqueue(_request("a")[0])
    thread, got = _next_in_thread(batcher)
    clock.wait_for_sleepers(1)
    batcher.enqueue(_request("b")[0])
    clock.advance(us=99)
    clock.wait_for_sleepers(1)
    assert got == []
    clock.advance(us=1)
    thread.join(5)
    assert _ids(got[0]) == ["a", "b"]
    assert got[0].requests[0].queue_start_ns + 100_000 <= clock.now_ns()


def test_preferred_size_sends_before_the_delay():
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 1000000 }")
    for name in "abcd":
        batcher.enqueue(_request(name)[0])
    assert _ids(batcher.next_payload()) == ["a", "b", "c", "d"]


def test_a_smaller_preferred_size_goes_before_the_delay():
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 1000 }")
    for name in "abc":
        batcher.enqueue(_request(name)[0])
    thread, got = _next_in_thread(batcher)
    thread.join(5)
    assert _ids(got[0]) == ["a", "b"]  # Triton: the best preferred prefix, at once
    thread, got = _next_in_thread(batcher)
    clock.wait_for_sleepers(1)  # "c" alone is no preferred size: it waits its delay
    assert got == []
    clock.advance(us=1000)
    thread.join(5)
    assert _ids(got[0]) == ["c"]


def test_a_waiter_wakes_when_a_request_makes_a_preferred_size():
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 1000 }")
    batcher.enqueue(_request("a")[0])
    thread, got = _next_in_thread(batcher)
    clock.wait_for_sleepers(1)
    batcher.enqueue(_request("b")[0])  # 2 is preferred: no waiting for the delay
    thread.join(5)
    assert _ids(got[0]) == ["a", "b"]


def test_the_prefix_before_passing_the_largest_preferred_size_goes_at_once():
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000 }")
    batcher.enqueue(_request("a", batch=3)[0])
    batcher.enqueue(_request("b", batch=3)[0])
    thread, got = _next_in_thread(batcher)
    thread.join(5)
    assert _ids(got[0]) == ["a"]


def test_at_the_delay_everything_that_fits_goes():
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 50 }")
    for name, size in zip("abcd", (1, 1, 1, 6), strict=True):
        batcher.enqueue(_request(name, batch=size)[0])
    clock.advance(us=50)
    # the preferred prefix a, b is not what goes once the delay passed: all that fits
    assert _ids(batcher.next_payload()) == ["a", "b", "c"]
    assert _ids(batcher.next_payload()) == ["d"]


def test_the_delay_counts_from_the_oldest_request():
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100 }")
    batcher.enqueue(_request("a")[0])
    clock.advance(us=60)
    batcher.enqueue(_request("b")[0])
    thread, got = _next_in_thread(batcher)
    clock.wait_for_sleepers(1)
    clock.advance(us=39)
    clock.wait_for_sleepers(1)
    assert got == []
    clock.advance(us=1)
    thread.join(5)
    assert _ids(got[0]) == ["a", "b"]


def test_shape_incompatible_requests_are_not_batched_together():
    batcher, _, _ = _batcher("dynamic_batching { }")
    batcher.enqueue(_request("a", width=4)[0])
    batcher.enqueue(_request("b", width=5)[0])
    batcher.enqueue(_request("c", width=4)[0])
    assert _ids(batcher.next_payload()) == ["a"]
    assert _ids(batcher.next_payload()) == ["b"]
    assert _ids(batcher.next_payload()) == ["c"]


def _parsed(config: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(config + "dynamic_batching { }", model_config_pb2.ModelConfig())


def test_a_fixed_shape_model_batches_without_computing_shape_keys():
    # Validated requests of a model whose inputs are all required and of fixed dims share
    # one item shape: the key is a constant (width 4 stands for what validation admits).
    fixed = DynamicBatcher(_parsed(BASE.replace("dims: [ -1 ] }", "dims: [ 4 ] }", 1)), 1,
                           ManualClock(), lambda r: None)
    for name in "abc":
        fixed.enqueue(_request(name)[0])
    assert _ids(fixed.next_payload()) == ["a", "b", "c"]
    assert fixed._shape_key(_request("d", width=4)[0]) == ()


@pytest.mark.parametrize("input_options", [
    "dims: [ -1 ]",  # any width
    "dims: [ 4 ] optional: true",  # present or not
    "dims: [ 4 ] reshape: { shape: [ -1 ] }",
    "dims: [ 4 ] allow_ragged_batch: true",
])
def test_shape_keys_are_computed_unless_every_input_is_fixed(input_options: str):
    config = BASE.replace("dims: [ -1 ] }", input_options + " }", 1)
    batcher = DynamicBatcher(_parsed(config), 1, ManualClock(), lambda r: None)
    assert batcher._shape_key(_request("a", width=4)[0]) != ()


def test_ragged_inputs_batch_together_when_allowed():
    config = BASE.replace("dims: [ -1 ] }", "dims: [ -1 ] allow_ragged_batch: true }", 1)
    parsed = text_format.Parse(config + "dynamic_batching { }", model_config_pb2.ModelConfig())
    batcher = DynamicBatcher(parsed, 1, ManualClock(), lambda r: None)
    batcher.enqueue(_request("a", width=4)[0])
    batcher.enqueue(_request("b", width=5)[0])
    assert _ids(batcher.next_payload()) == ["a", "b"]


def test_higher_priority_levels_go_first():
    batcher, _, _ = _batcher(
        "dynamic_batching { priority_levels: 3 default_priority_level: 2 }")
    batcher.enqueue(_request("low", priority=3)[0])
    batcher.enqueue(_request("default")[0])
    batcher.enqueue(_request("high", priority=1)[0])
    batcher.enqueue(_request("out_of_range", priority=9)[0])
    assert _ids(batcher.next_payload()) == ["high", "default", "out_of_range", "low"]


# Run apart, its memory bounded: a queue per level would fill it (2^64 - 1 of them).
_LARGEST_LEVELS = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_dynamic_batcher import _batcher, _ids, _request
from infercore.errors import UnavailableError
top = 2**64 - 1
batcher, _, _ = _batcher(
    f"dynamic_batching {{{{ priority_levels: {{top}} default_priority_level: 1 "
    f"priority_queue_policy {{{{ key: {{top}} value: {{{{ max_queue_size: 1 }}}} }}}} }}}}")
for name, priority in (("top", top), ("five", 5), ("zero", 0), ("one", 1)):
    batcher.enqueue(_request(name, priority=priority)[0])
try:
    batcher.enqueue(_request("top_again", priority=top)[0])
except UnavailableError as exc:
    print(exc)
print(_ids(batcher.next_payload()))
batcher.enqueue(_request("top_later", priority=top)[0])  # its level is empty again
print(_ids(batcher.next_payload()))
"""


def test_the_largest_priority_levels_load_and_order_requests():
    done = subprocess.run([sys.executable, "-c", _LARGEST_LEVELS], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "Exceeds maximum queue size", "['zero', 'one', 'five', 'top']", "['top_later']"]


def test_levels_without_requests_hold_nothing_back():
    batcher, _, _ = _batcher("dynamic_batching { priority_levels: 1000000 "
                             "default_priority_level: 500000 priority_queue_policy { "
                             "key: 3 value: { max_queue_size: 1 } } }")
    first, first_stream = _request("first", priority=3)
    batcher.enqueue(first)
    with pytest.raises(UnavailableError, match="Exceeds maximum queue size"):
        batcher.enqueue(_request("second", priority=3)[0])
    first.cancel()
    assert isinstance(first_stream.result(timeout=5).error, CancelledError)
    batcher.enqueue(_request("again", priority=3)[0])  # the level emptied: room again
    batcher.enqueue(_request("default", priority=1000001)[0])
    batcher.enqueue(_request("last", priority=999999)[0])
    assert _ids(batcher.next_payload()) == ["again", "default", "last"]


def test_max_queue_size_rejects_at_enqueue():
    batcher, _, _ = _batcher(
        "dynamic_batching { default_queue_policy { max_queue_size: 2 } }")
    batcher.enqueue(_request("a")[0])
    batcher.enqueue(_request("b")[0])
    with pytest.raises(UnavailableError, match="Exceeds maximum queue size"):
        batcher.enqueue(_request("c")[0])
    assert batcher.queued_count() == 2


def test_timeout_reject_answers_and_never_batches_the_request():
    batcher, clock, failed = _batcher(
        "dynamic_batching { max_queue_delay_microseconds: 1000 default_queue_policy { "
        "timeout_action: REJECT default_timeout_microseconds: 10 } }")
    request, stream = _request("a")
    batcher.enqueue(request)
    thread, got = _next_in_thread(batcher)
    clock.wait_for_sleepers(1)
    clock.advance(us=10)
    response = stream.result(timeout=5)
    assert isinstance(response.error, UnavailableError)
    assert "Request timeout expired" in str(response.error)
    assert failed == [request] and batcher.queued_count() == 0
    batcher.stop()
    thread.join(5)
    assert got == [None]


@pytest.mark.parametrize("override", [True, False])
def test_a_request_timeout_shortens_the_default_only_when_allowed(override):
    batcher, clock, _ = _batcher(
        "dynamic_batching { default_queue_policy { default_timeout_microseconds: 100 "
        f"allow_timeout_override: {str(override).lower()} }} }}")
    short, short_stream = _request("short", timeout_us=5)
    batcher.enqueue(short)
    batcher.enqueue(_request("other")[0])
    clock.advance(us=5)
    payload = batcher.next_payload()
    if override:
        assert _ids(payload) == ["other"]
        assert isinstance(short_stream.result(timeout=5).error, UnavailableError)
    else:
        assert _ids(payload) == ["short", "other"]


def test_timeout_delay_moves_the_request_behind_the_others():
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 1 ] default_queue_policy { "
        "timeout_action: DELAY default_timeout_microseconds: 10 } }")
    batcher.enqueue(_request("late")[0])
    clock.advance(us=10)
    batcher.enqueue(_request("fresh")[0])
    assert _ids(batcher.next_payload()) == ["fresh"]
    assert _ids(batcher.next_payload()) == ["late"]


def test_cancel_removes_a_queued_request_at_once():
    batcher, _, failed = _batcher("dynamic_batching { }")
    request, stream = _request("a")
    batcher.enqueue(request)
    batcher.enqueue(_request("b")[0])
    request.cancel()
    assert isinstance(stream.result(timeout=5).error, CancelledError)
    assert _ids(batcher.next_payload()) == ["b"]
    assert failed == [request]


def test_preserve_ordering_releases_responses_in_arrival_order():
    batcher, _, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 1 ] preserve_ordering: true }")
    (a, a_stream), (b, b_stream) = _request("a"), _request("b")
    batcher.enqueue(a)
    batcher.enqueue(b)
    first, second = batcher.next_payload(), batcher.next_payload()
    for request in (a, b):
        request.sender.hold()
        request.sender.send({}, final=True)
    second.on_release(second.requests)  # b finishes first...
    with pytest.raises(TimeoutError):
        b_stream.result(timeout=0.01)  # ...but waits for a
    first.on_release(first.requests)
    assert a_stream.result(timeout=5).error is None
    assert b_stream.result(timeout=5).error is None


def test_stop_lets_queued_work_finish_then_returns_none():
    batcher, _, _ = _batcher("dynamic_batching { max_queue_delay_microseconds: 1000000 }")
    batcher.enqueue(_request("a")[0])
    batcher.stop()
    assert _ids(batcher.next_payload()) == ["a"]
    assert batcher.next_payload() is None
    with pytest.raises(UnavailableError):
        batcher.enqueue(_request("b")[0])


def test_drain_answers_leftovers_with_unavailable():
    batcher, _, failed = _batcher("dynamic_batching { max_queue_delay_microseconds: 1000000 }")
    request, stream = _request("a")
    batcher.enqueue(request)
    batcher.drain()
    assert isinstance(stream.result(timeout=5).error, UnavailableError)
    assert failed == [request]


def test_two_waiting_instances_each_get_a_batch():
    batcher, clock, _ = _batcher("dynamic_batching { preferred_batch_size: [ 2 ] }",
                                 instances=2)
    (t1, got1), (t2, got2) = _next_in_thread(batcher), _next_in_thread(batcher)
    clock.wait_for_sleepers(2)
    for name in "abcd":
        batcher.enqueue(_request(name)[0])
    t1.join(5)
    t2.join(5)
    batches = sorted(_ids(got1[0]) + _ids(got2[0]))
    assert batches == ["a", "b", "c", "d"]


def test_a_request_timeout_does_not_apply_without_a_default_one():
    # Triton's PolicyQueue::Enqueue: the request's own timeout only shortens the default
    batcher, clock, failed = _batcher(
        "dynamic_batching { default_queue_policy { allow_timeout_override: true } }")
    batcher.enqueue(_request("a", timeout_us=5)[0])
    clock.advance(us=50)
    assert _ids(batcher.next_payload()) == ["a"] and not failed


def test_a_rejected_request_is_marked_timed_out():
    batcher, clock, failed = _batcher(
        "dynamic_batching { default_queue_policy { default_timeout_microseconds: 10 } }")
    request, stream = _request("a")
    batcher.enqueue(request)
    clock.advance(us=11)
    batcher.enqueue(_request("b")[0])
    assert _ids(batcher.next_payload()) == ["b"]
    assert failed == [request] and request.timed_out
    assert str(stream.result(timeout=5).error) == "Request timeout expired"


def test_delayed_requests_stay_ahead_of_less_urgent_levels():
    # Triton keeps a delayed queue per priority level (PolicyQueue::At): a delayed request
    # goes behind its own level's fresh requests only
    batcher, clock, _ = _batcher(
        "dynamic_batching { preferred_batch_size: [ 1 ] priority_levels: 2 "
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }")
    batcher.enqueue(_request("late2", priority=2)[0])
    batcher.enqueue(_request("late1", priority=1)[0])
    clock.advance(us=11)
    batcher.enqueue(_request("fresh2", priority=2)[0])
    batcher.enqueue(_request("fresh1", priority=1)[0])
    order = [_ids(batcher.next_payload())[0] for _ in range(4)]
    assert order == ["fresh1", "late1", "fresh2", "late2"]
