"""Caller runs: who executes a request, and that no request is ever left without a runner.

The handoff rule (dispatch.py): ``submit(request, Caller.THREAD)`` (or ``Caller.LOOP``)
executes the request on the calling thread when an instance can be reserved now, waking
nobody; otherwise the request is queued and exactly one wake-up is sent before ``submit``
returns. Each test
drives one of the races the rule must survive with explicit events and instance locks
(and the ManualClock for the batcher's delays), never with sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.backends.base import InstanceInfo
from infercore.caller import Caller
from infercore.dispatch import BackendThread, Dispatch
from infercore.errors import CancelledError, UnavailableError
from infercore.instance import INLINE_ON_LOOP_MAX_NS, ModelInstance
from infercore.options import RateLimitMode
from infercore.payload import Payload
from infercore.rate_limiter import RateLimiter, ResourceAsk
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.scheduling.default import DefaultScheduler
from infercore.scheduling.dynamic import DynamicBatcher
from infercore.stats import ModelStats
from infercore.tensor import Tensor
from infercore.testing import ManualClock

WAIT_S = 10.0
BATCHING = """
name: "m"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""


class Recorder:
    """A backend instance that answers each request and records who ran which batch."""

    def __init__(self, during: Callable[[Payload], None] | None = None) -> None:
        self.runs: list[tuple[str, list[str]]] = []  # (thread name, request ids)
        self.cancelled_seen: list[bool] = []
        self.during = during

    def execute(self, payload: Payload) -> None:
        self.runs.append((threading.current_thread().name, [r.id for r in payload.requests]))
        if self.during is not None:
            self.during(payload)
        for request in payload.requests:
            self.cancelled_seen.append(request.is_cancelled())
            request.sender.send({}, final=True)  # type: ignore[union-attr]

    def finalize(self) -> None:
        pass


def _instance(backend: Recorder, name: str = "m_0", *, short: bool = False,
              resources: ResourceAsk | None = None) -> ModelInstance:
    info = InstanceInfo(name, "m", 0, "KIND_CPU", 0)
    extra = {} if resources is None else {"resources": resources}
    instance = ModelInstance("m", info, backend, ModelStats("m", 1), decoupled=False,
                             clock=ManualClock().now_ns, **extra)
    if short:
        instance.recent_execute_ns = INLINE_ON_LOOP_MAX_NS // 2
    return instance


def _request(name: str, width: int = 4, priority: int = 0,
             timeout_us: int = 0) -> tuple[InferRequest, ResponseStream]:
    x = Tensor.from_numpy(np.zeros((1, width), np.float32))
    request = InferRequest("m", {"X": x}, id=name, priority=priority, timeout_us=timeout_us)
    request.batch_size = 1
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, "m", 1)
    return request, stream


def _default(*instances: ModelInstance, limiter: RateLimiter | None = None
             ) -> tuple[DefaultScheduler, Dispatch, list[InferRequest]]:
    failed: list[InferRequest] = []
    scheduler = DefaultScheduler("m", max(1, len(instances)), ManualClock().now_ns,
                                 failed.append)
    dispatch = Dispatch("m", instances, limiter or RateLimiter())
    dispatch.start(scheduler, threads=False)
    return scheduler, dispatch, failed


def _batcher(extra: str, *instances: ModelInstance, clock: ManualClock | None = None
             ) -> tuple[DynamicBatcher, Dispatch, ManualClock]:
    clock = clock or ManualClock()
    config = text_format.Parse(BATCHING + extra, model_config_pb2.ModelConfig())
    batcher = DynamicBatcher(config, max(1, len(instances)), clock, lambda request: None)
    dispatch = Dispatch("m", instances)
    dispatch.start(batcher, threads=False)
    return batcher, dispatch, clock


def _thread_for(dispatch: Dispatch, instance: ModelInstance) -> BackendThread:
    thread = BackendThread("instance-thread", [instance], dispatch)
    thread.start()
    return thread


def _stop(scheduler, *threads: BackendThread) -> None:
    scheduler.stop()
    for thread in threads:
        assert thread.join(WAIT_S), "the instance thread did not stop"


def _answered_once(stream: ResponseStream) -> None:
    responses = list(stream)
    assert len(responses) == 1 and responses[0].final


ME = threading.current_thread().name


# -- the default scheduler -------------------------------------------------------------


def test_caller_runs_on_an_idle_instance_and_wakes_nobody():
    backend = Recorder()
    scheduler, dispatch, _ = _default(_instance(backend))
    request, stream = _request("a")
    dispatch.submit(request, Caller.THREAD)
    assert stream.done  # answered before enqueue returned
    assert backend.runs == [(ME, ["a"])]
    stats = scheduler.statistics()
    assert (stats.queued, stats.ran_inline, stats.wakeups) == (0, 1, 0)
    _stop(scheduler)
    assert scheduler.next_payload() is None  # nothing was ever put for a thread


def test_busy_instance_hands_off_with_exactly_one_wakeup():
    backend = Recorder()
    instance = _instance(backend)
    scheduler, dispatch, _ = _default(instance)
    thread = _thread_for(dispatch, instance)
    request, stream = _request("a")
    with instance.busy:  # as if a payload were executing on it
        dispatch.submit(request, Caller.THREAD)
        assert scheduler.statistics().wakeups == 1
    _answered_once(stream)  # iterating may not run it: the thread already owns it or will
    assert backend.runs == [("instance-thread", ["a"])]
    _stop(scheduler, thread)


def test_an_instance_freed_just_after_the_check_still_gets_the_request():
    class FreedAfterCheck(ModelInstance):
        def try_acquire(self) -> bool:
            reserved = super().try_acquire()  # busy: False
            self.busy.release()  # ... and the payload it was running ends right now
            return reserved

    backend = Recorder()
    instance = FreedAfterCheck("m", InstanceInfo("m_0", "m", 0, "KIND_CPU", 0), backend,
                               ModelStats("m", 1), decoupled=False,
                               clock=ManualClock().now_ns)
    scheduler, dispatch, _ = _default(instance)
    thread = _thread_for(dispatch, instance)
    instance.busy.acquire()
    request, stream = _request("a")
    dispatch.submit(request, Caller.THREAD)
    assert stream.result(timeout=WAIT_S) is not None  # a reader with a deadline never runs it
    assert backend.runs == [("instance-thread", ["a"])]
    _stop(scheduler, thread)


def test_on_an_event_loop_only_an_instance_known_to_be_short_runs_inline():
    backend = Recorder()
    instance = _instance(backend)  # recent executions unknown
    scheduler, dispatch, _ = _default(instance)
    first, first_stream = _request("first")
    dispatch.submit(first, Caller.LOOP)
    assert not first_stream.done and scheduler.statistics().wakeups == 1
    thread = _thread_for(dispatch, instance)
    _answered_once(first_stream)
    _stop(scheduler, thread)

    scheduler, dispatch, _ = _default(instance)
    instance.recent_execute_ns = INLINE_ON_LOOP_MAX_NS + 1
    slow, slow_stream = _request("slow")
    dispatch.submit(slow, Caller.LOOP)
    assert not slow_stream.done
    instance.recent_execute_ns = INLINE_ON_LOOP_MAX_NS // 2
    short, short_stream = _request("short")
    dispatch.submit(short, Caller.LOOP)
    assert short_stream.done
    assert backend.runs[-1] == (ME, ["short"])


def test_the_caller_borrows_the_idle_one_of_several_instances():
    busy_backend, idle_backend = Recorder(), Recorder()
    busy, idle = _instance(busy_backend, "m_0"), _instance(idle_backend, "m_1")
    scheduler, dispatch, _ = _default(busy, idle)
    request, stream = _request("a")
    with busy.busy:
        dispatch.submit(request, Caller.THREAD)
    assert stream.done
    assert idle_backend.runs == [(ME, ["a"])] and busy_backend.runs == []
    assert scheduler.statistics().wakeups == 0


def test_rate_limiter_resources_in_use_mean_a_handoff():
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT)
    ask = ResourceAsk((("R", -1, 1),))
    limiter.register("m", [ask])
    backend = Recorder()
    instance = _instance(backend, resources=ask)
    scheduler, dispatch, _ = _default(instance, limiter=limiter)
    thread = _thread_for(dispatch, instance)
    limiter.acquire("another model's instance", ask)  # R is taken
    request, stream = _request("a")
    dispatch.submit(request, Caller.THREAD)
    assert not stream.done and scheduler.statistics().wakeups == 1
    limiter.release("another model's instance", ask)
    _answered_once(stream)
    assert backend.runs == [("instance-thread", ["a"])]
    _stop(scheduler, thread)


def test_a_request_cancelled_before_enqueue_is_answered_not_run():
    backend = Recorder()
    scheduler, dispatch, failed = _default(_instance(backend))
    request, stream = _request("a")
    request.cancel()
    dispatch.submit(request, Caller.THREAD)
    responses = list(stream)
    assert len(responses) == 1 and isinstance(responses[0].error, CancelledError)
    assert backend.runs == [] and failed == [request]


def test_a_cancel_during_inline_execution_reaches_the_backend_only():
    def cancel_now(payload: Payload) -> None:
        payload.requests[0].cancel()

    backend = Recorder(during=cancel_now)
    scheduler, dispatch, failed = _default(_instance(backend))
    request, stream = _request("a")
    dispatch.submit(request, Caller.THREAD)
    responses = list(stream)
    assert len(responses) == 1 and responses[0].error is None  # the backend's answer
    assert backend.cancelled_seen == [True] and failed == []


def test_a_reader_without_the_promise_claims_its_queued_request_once():
    backend = Recorder()
    instance = _instance(backend)
    scheduler, dispatch, _ = _default(instance)
    request, stream = _request("a")
    scheduler.enqueue(request)  # no promise: handed off at once
    assert scheduler.statistics().wakeups == 1
    assert dispatch.run_inline(request)  # the reader got there first
    assert not dispatch.run_inline(request)  # claimed: never twice
    _answered_once(stream)
    assert backend.runs == [(ME, ["a"])]
    _stop(scheduler)
    assert scheduler.next_payload() is None  # the thread skips the claimed request


def test_a_finalized_instance_is_never_borrowed():
    backend = Recorder()
    instance = _instance(backend)
    scheduler, dispatch, failed = _default(instance)
    instance.finalize()
    request, stream = _request("a")
    dispatch.submit(request, Caller.THREAD)
    assert backend.runs == [] and not stream.done
    _stop(scheduler)
    scheduler.drain()  # what an unload does after its threads exit
    responses = list(stream)
    assert isinstance(responses[0].error, UnavailableError) and failed == [request]


def test_enqueue_after_stop_refuses_before_running_anything():
    backend = Recorder()
    scheduler, dispatch, _ = _default(_instance(backend))
    scheduler.stop()
    with pytest.raises(UnavailableError):
        dispatch.submit(_request("a")[0], Caller.THREAD)
    assert backend.runs == []


# -- the dynamic batcher ---------------------------------------------------------------


def test_batcher_caller_runs_a_batch_with_the_requests_queued_before_it():
    backend = Recorder()
    instance = _instance(backend)
    batcher, dispatch, _ = _batcher("dynamic_batching { }", instance)
    with instance.busy:
        first, first_stream = _request("first")
        dispatch.submit(first, Caller.THREAD)  # busy: queued, one wake-up
    second, second_stream = _request("second")
    dispatch.submit(second, Caller.THREAD)
    assert first_stream.done and second_stream.done
    assert backend.runs == [(ME, ["first", "second"])]
    stats = batcher.statistics()
    assert (stats.queued, stats.ran_inline, stats.wakeups) == (0, 1, 1)


def test_batcher_with_a_delay_never_runs_inline_and_wakes_one_thread():
    backend = Recorder()
    instance = _instance(backend, short=True)
    batcher, dispatch, clock = _batcher("dynamic_batching { max_queue_delay_microseconds: 100 }",
                              instance)
    thread = _thread_for(dispatch, instance)
    clock.wait_for_sleepers(1)  # idle, waiting for work without a deadline
    request, stream = _request("a")
    dispatch.submit(request, Caller.LOOP)
    assert not stream.done and batcher.statistics().wakeups == 1
    clock.wait_for_sleepers(1)  # woken, and now waiting for the batch's deadline
    clock.advance(us=100)
    _answered_once(stream)
    assert backend.runs == [("instance-thread", ["a"])]
    _stop(batcher, thread)


DELAYED = "dynamic_batching { max_queue_delay_microseconds: 100 %s }"


def _waiting_for_company(extra: str = "") -> tuple:
    """A batcher whose one thread waits for the deadline of a batch holding request "a"."""
    backend = Recorder()
    instance = _instance(backend)
    batcher, dispatch, clock = _batcher(DELAYED % extra, instance)
    first, first_stream = _request("a")
    batcher.enqueue(first)  # no thread waits yet: one signal, found by the thread below
    thread = _thread_for(dispatch, instance)
    clock.wait_for_sleepers(1)  # parked until a's batch deadline
    assert batcher.statistics().wakeups == 1
    return batcher, clock, backend, thread, first_stream


def test_a_request_joining_a_batch_that_waits_for_its_deadline_wakes_nobody():
    batcher, clock, backend, thread, first_stream = _waiting_for_company()
    second, second_stream = _request("b")
    batcher.enqueue(second)
    assert batcher.statistics().wakeups == 1  # the waiting thread will take it anyway
    clock.advance(us=100)
    _answered_once(first_stream)
    _answered_once(second_stream)
    assert backend.runs == [("instance-thread", ["a", "b"])]
    _stop(batcher, thread)


def test_a_request_that_makes_the_waiting_batch_ready_wakes_its_thread():
    batcher, clock, backend, thread, first_stream = _waiting_for_company(
        "preferred_batch_size: [ 2 ]")
    second, second_stream = _request("b")
    batcher.enqueue(second)
    assert batcher.statistics().wakeups == 2
    _answered_once(second_stream)  # without the clock moving: the batch is ready now
    assert backend.runs == [("instance-thread", ["a", "b"])]
    _stop(batcher, thread)


def test_a_request_that_makes_a_smaller_preferred_size_wakes_the_waiting_thread():
    batcher, clock, backend, thread, first_stream = _waiting_for_company(
        "preferred_batch_size: [ 2, 4 ]")
    second, second_stream = _request("b")
    batcher.enqueue(second)  # 2 is preferred (not the largest): the batch goes now
    assert batcher.statistics().wakeups == 2
    _answered_once(second_stream)
    assert backend.runs == [("instance-thread", ["a", "b"])]
    _stop(batcher, thread)


def test_a_more_urgent_request_wakes_the_thread_waiting_for_a_deadline():
    # it goes to the front of the batch, whose preferred prefixes the waiter must recount
    batcher, clock, backend, thread, first_stream = _waiting_for_company(
        "priority_levels: 2 default_priority_level: 2")
    urgent, urgent_stream = _request("urgent", priority=1)
    batcher.enqueue(urgent)
    assert batcher.statistics().wakeups == 2
    clock.wait_for_sleepers(1)
    clock.advance(us=100)
    _answered_once(urgent_stream)
    _answered_once(first_stream)
    assert backend.runs == [("instance-thread", ["urgent", "a"])]
    _stop(batcher, thread)


def test_a_request_of_another_shape_sends_the_waiting_batch_at_once():
    batcher, clock, backend, thread, first_stream = _waiting_for_company()
    other, other_stream = _request("wide", width=8)
    batcher.enqueue(other)
    assert batcher.statistics().wakeups == 2
    _answered_once(first_stream)  # it cannot grow any more: it goes without waiting
    assert backend.runs == [("instance-thread", ["a"])]
    clock.wait_for_sleepers(1)  # the other shape now waits for its own deadline
    clock.advance(us=100)
    _answered_once(other_stream)
    _stop(batcher, thread)


def test_a_request_with_an_earlier_timeout_wakes_the_waiting_thread():
    batcher, clock, backend, thread, first_stream = _waiting_for_company(
        "default_queue_policy { default_timeout_microseconds: 1000000 "
        "allow_timeout_override: true }")
    hurried, hurried_stream = _request("hurried", timeout_us=30)
    batcher.enqueue(hurried)
    assert batcher.statistics().wakeups == 2  # the thread must wake for the timeout
    clock.wait_for_sleepers(1)
    clock.advance(us=30)
    responses = list(hurried_stream)
    assert str(responses[0].error) == "Request timeout expired"
    assert not first_stream.done
    clock.wait_for_sleepers(1)
    clock.advance(us=70)
    _answered_once(first_stream)
    assert backend.runs == [("instance-thread", ["a"])]
    _stop(batcher, thread)


def test_batcher_wakes_a_thread_when_the_callers_request_is_not_at_the_front():
    backend = Recorder()
    instance = _instance(backend)
    batcher, dispatch, _ = _batcher("dynamic_batching { priority_levels: 2 }", instance)
    with instance.busy:
        urgent, urgent_stream = _request("urgent", width=8, priority=1)
        batcher.enqueue(urgent)
    # The caller reserves the idle instance, but the front batch (the urgent request,
    # another shape) cannot hold its request: it hands off instead of running.
    mine, mine_stream = _request("mine", width=4, priority=2)
    dispatch.submit(mine, Caller.THREAD)
    assert not urgent_stream.done and not mine_stream.done
    stats = batcher.statistics()
    assert (stats.queued, stats.ran_inline, stats.wakeups) == (2, 0, 2)
    thread = _thread_for(dispatch, instance)
    _answered_once(urgent_stream)
    _answered_once(mine_stream)
    assert backend.runs == [("instance-thread", ["urgent"]), ("instance-thread", ["mine"])]
    _stop(batcher, thread)


def test_batcher_rejects_expired_requests_and_still_hands_off_the_callers_one():
    backend = Recorder()
    instance = _instance(backend)
    clock = ManualClock()
    batcher, dispatch, _ = _batcher(
        "dynamic_batching { default_queue_policy { default_timeout_microseconds: 50 "
        "allow_timeout_override: true } }", instance, clock=clock)
    with instance.busy:
        old, old_stream = _request("old", timeout_us=50)
        batcher.enqueue(old)
    clock.advance(us=60)
    mine, mine_stream = _request("mine")
    dispatch.submit(mine, Caller.THREAD)
    responses = list(old_stream)
    assert str(responses[0].error) == "Request timeout expired"
    assert not mine_stream.done and batcher.statistics().wakeups == 2
    thread = _thread_for(dispatch, instance)
    _answered_once(mine_stream)
    assert backend.runs == [("instance-thread", ["mine"])]
    _stop(batcher, thread)


def test_batcher_cancel_of_a_handed_off_request_answers_it_once():
    backend = Recorder()
    instance = _instance(backend)
    batcher, dispatch, _ = _batcher("dynamic_batching { }", instance)
    with instance.busy:
        request, stream = _request("a")
        dispatch.submit(request, Caller.THREAD)
    request.cancel()
    responses = list(stream)
    assert len(responses) == 1 and isinstance(responses[0].error, CancelledError)
    assert batcher.statistics().queued == 0 and backend.runs == []


def test_batcher_preserve_ordering_holds_an_inline_batch_behind_an_earlier_one():
    first_running = threading.Event()
    release_first = threading.Event()

    def block_first(payload: Payload) -> None:
        if payload.requests[0].id == "first":
            first_running.set()
            assert release_first.wait(WAIT_S)

    backend_a, backend_b = Recorder(during=block_first), Recorder()
    a, b = _instance(backend_a, "m_0"), _instance(backend_b, "m_1")
    batcher, dispatch, _ = _batcher("dynamic_batching { preserve_ordering: true }", a, b)
    first, first_stream = _request("first")
    runner = threading.Thread(target=lambda: dispatch.submit(first, Caller.THREAD))
    runner.start()
    assert first_running.wait(WAIT_S)
    second, second_stream = _request("second")
    dispatch.submit(second, Caller.THREAD)  # runs on instance b, here
    assert backend_b.runs == [(ME, ["second"])]
    assert not second_stream.done  # held until "first" is released
    release_first.set()
    runner.join(WAIT_S)
    assert first_stream.done and second_stream.done


# -- through the model: caller= ---------------------------------------------------------


def _add_sub_request() -> InferRequest:
    x = Tensor.from_numpy(np.ones((1, 4), np.float32))
    return InferRequest("add_sub", {"INPUT0": x, "INPUT1": x})


async def test_a_loop_caller_runs_a_short_model_inside_infer(add_sub_repo):
    from infercore import Server

    async with Server(model_repository=add_sub_repo.path) as server:
        loaded = server._manager.get("add_sub")
        first = server.infer(_add_sub_request(), caller=Caller.LOOP)
        assert loaded._scheduler.statistics().wakeups == 1  # duration unknown: handed off
        await first
        instance = loaded.instances[0]
        with instance.busy:  # its thread answered, and now lets the instance go
            instance.recent_execute_ns = INLINE_ON_LOOP_MAX_NS // 2  # known short
        before = loaded._scheduler.statistics()
        stream = server.infer(_add_sub_request(), caller=Caller.LOOP)
        assert stream.done  # executed on this loop's thread before infer returned
        after = loaded._scheduler.statistics()
        assert after.wakeups == before.wakeups and after.ran_inline == before.ran_inline + 1
        response = await stream
        assert response.outputs["OUTPUT0"].to_numpy().tolist() == [[2.0] * 4]


def test_a_thread_caller_runs_any_model_inside_infer(add_sub_repo):
    from infercore import Server

    with Server(model_repository=add_sub_repo.path) as server:
        loaded = server._manager.get("add_sub")
        stream = server.infer(_add_sub_request(), caller=Caller.THREAD)  # duration unknown
        assert stream.done
        stats = loaded._scheduler.statistics()
        assert (stats.ran_inline, stats.wakeups) == (1, 0)


# -- what counts as short ---------------------------------------------------------------


def _timed_instance() -> tuple[ModelInstance, Callable[[int], None]]:
    """An instance whose executions take exactly the microseconds asked for."""
    clock = ManualClock()
    took: list[int] = []
    backend = Recorder(during=lambda payload: clock.advance(us=took.pop()))
    info = InstanceInfo("m_0", "m", 0, "KIND_CPU", 0)
    instance = ModelInstance("m", info, backend, ModelStats("m", 1), decoupled=False,
                             clock=clock.now_ns)
    dispatch = Dispatch("m", [instance])

    def run(us: int) -> None:
        took.append(us)
        request, _ = _request("r")
        dispatch.run(instance, Payload([request], clock.now_ns))

    return instance, run


def test_a_rare_slow_execution_leaves_a_short_model_short():
    instance, run = _timed_instance()
    assert not instance.runs_short()  # unknown counts as long
    run(20)
    assert instance.runs_short()
    run(250)  # e.g. the loop thread preempted mid-execution
    assert instance.runs_short()


def test_a_model_slow_every_time_becomes_long_within_a_few_executions():
    instance, run = _timed_instance()
    run(20)
    for _ in range(7):
        run(100)  # twice the line
    assert instance.runs_short()
    run(100)
    assert not instance.runs_short()
    instance, run = _timed_instance()
    run(20)
    run(2_000)  # a long one crosses the line at once
    assert not instance.runs_short()
    for _ in range(3):  # and fast ones bring it back quickly
        run(20)
    assert instance.runs_short()
