"""ResponseStream and ResponseSender: the thread <-> caller bridge, driven by producer threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from infercore.errors import CancelledError, InternalError, InvalidArgumentError
from infercore.observability.trace_record import TracingSender
from infercore.request import InferRequest
from infercore.response import InferResponse, ResponseSender, ResponseStream
from infercore.tensor import Tensor

WAIT_S = 5.0  # upper bound for a wait that should end at once; never reached when passing


def _make(
    *,
    requested_outputs: list[str] | None = None,
    raise_on_error: bool = True,
    on_close: Callable[[InferRequest], None] | None = None,
) -> tuple[InferRequest, ResponseStream, ResponseSender]:
    request = InferRequest("m", {}, id="req-1", requested_outputs=requested_outputs)
    stream = ResponseStream(request, raise_on_error=raise_on_error)
    sender = ResponseSender(request, stream, "m", 3, on_close=on_close)
    request.sender = sender
    return request, stream, sender


def _out(value: int) -> dict[str, Tensor]:
    return {"OUT": Tensor.from_object(np.array([value], dtype=np.int32))}


def _value(response: InferResponse) -> int:
    return int(response.outputs["OUT"].to_numpy()[0])


class _Threads:
    """Starts producer/consumer threads, records their exceptions, joins them at teardown."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, target: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the fixture
                self.errors.append(exc)

        thread = threading.Thread(target=run, name=f"test-producer-{len(self.threads)}")
        self.threads.append(thread)
        thread.start()
        return thread

    def join(self) -> None:
        for thread in self.threads:
            thread.join(WAIT_S)
            assert not thread.is_alive(), f"{thread.name} did not finish"
        assert not self.errors, self.errors


@pytest.fixture
def threads() -> Iterator[_Threads]:
    owner = _Threads()
    yield owner
    owner.join()


# -- sync consumers --------------------------------------------------------------------


def test_sync_iteration_yields_responses_in_order_and_stops_after_final(threads):
    _, stream, sender = _make()
    acks = [threading.Event() for _ in range(4)]

    def produce() -> None:
        # Lockstep: each response is sent only after the consumer took the previous one, so
        # the consumer is (usually) parked when it arrives.
        for i in range(4):
            sender.send(_out(i), final=(i == 3))
            assert acks[i].wait(WAIT_S)

    threads.start(produce)
    seen = []
    for response in stream:
        seen.append(response)
        acks[len(seen) - 1].set()
    assert [_value(r) for r in seen] == [0, 1, 2, 3]
    assert [r.final for r in seen] == [False, False, False, True]
    assert stream.done
    with pytest.raises(StopIteration):
        next(stream)


def test_sync_iteration_receives_many_responses_from_a_fast_producer(threads):
    _, stream, sender = _make()
    count = 2000

    def produce() -> None:
        for i in range(count):
            sender.send(_out(i), final=False)
        sender.close()

    threads.start(produce)
    assert [_value(r) for r in stream] == list(range(count))


def test_responses_queued_before_final_are_still_handed_out():
    _, stream, sender = _make()
    sender.send(_out(1), final=False)
    sender.send(_out(2), final=True)
    assert stream.done
    assert [_value(r) for r in stream] == [1, 2]


def test_result_returns_the_last_response(threads):
    _, stream, sender = _make()

    def produce() -> None:
        sender.send(_out(10), final=False)
        sender.send(_out(20), final=False)
        sender.send(_out(30), final=True)

    threads.start(produce)
    response = stream.result(timeout=WAIT_S)
    assert response is not None
    assert _value(response) == 30
    assert response.final
    assert response.model == "m"
    assert response.model_version == 3
    assert response.request_id == "req-1"


def test_result_returns_the_only_response_of_a_non_decoupled_request(threads):
    _, stream, sender = _make()
    threads.start(lambda: sender.send(_out(7)))
    response = stream.result()
    assert response is not None and _value(response) == 7


def test_result_times_out_when_nothing_arrives_and_stream_still_works_afterwards(threads):
    _, stream, sender = _make()
    with pytest.raises(TimeoutError):
        stream.result(timeout=0.05)
    assert not stream.done
    threads.start(lambda: sender.send(_out(5)))
    response = stream.result(timeout=WAIT_S)
    assert response is not None and _value(response) == 5


def test_result_with_zero_timeout_raises_at_once_when_empty_and_returns_when_ready():
    _, stream, sender = _make()
    with pytest.raises(TimeoutError):
        stream.result(timeout=0)
    sender.send(_out(1))
    response = stream.result(timeout=0)
    assert response is not None and _value(response) == 1


def test_result_times_out_after_partial_responses_without_losing_them(threads):
    _, stream, sender = _make()
    sender.send(_out(1), final=False)
    with pytest.raises(TimeoutError):
        stream.result(timeout=0.05)
    # result() consumed the first response while waiting; the rest still arrive.
    threads.start(lambda: sender.send(_out(2)))
    response = stream.result(timeout=WAIT_S)
    assert response is not None and _value(response) == 2


def test_stream_raises_typed_error_when_raise_on_error(threads):
    _, stream, sender = _make()
    error = InvalidArgumentError("bad input 'X'")
    threads.start(lambda: sender.send_error(error))
    with pytest.raises(InvalidArgumentError) as info:
        stream.result(timeout=WAIT_S)
    assert info.value is error
    assert sender.failed


def test_stream_raises_error_during_sync_iteration_after_earlier_responses():
    _, stream, sender = _make()
    sender.send(_out(1), final=False)
    sender.send(error=InternalError("boom"), final=True)
    iterator = iter(stream)
    assert _value(next(iterator)) == 1
    with pytest.raises(InternalError, match="boom"):
        next(iterator)


def test_stream_yields_error_response_when_not_raise_on_error(threads):
    _, stream, sender = _make(raise_on_error=False)
    error = InvalidArgumentError("bad")
    threads.start(lambda: sender.send_error(error))
    responses = list(stream)
    assert len(responses) == 1
    assert responses[0].error is error
    assert responses[0].final
    assert responses[0].outputs == {}
    assert sender.failed


def test_sender_is_not_failed_after_successful_responses():
    _, _, sender = _make()
    sender.send(_out(1))
    assert not sender.failed


# -- async consumers -------------------------------------------------------------------


async def test_async_iteration_yields_responses_from_a_producer_thread(threads):
    _, stream, sender = _make()
    acks = [threading.Event() for _ in range(3)]

    def produce() -> None:
        for i in range(3):
            sender.send(_out(i), final=(i == 2))
            assert acks[i].wait(WAIT_S)

    threads.start(produce)
    seen = []
    async for response in stream:
        seen.append(_value(response))
        acks[len(seen) - 1].set()
    assert seen == [0, 1, 2]


async def test_async_iteration_receives_many_responses_from_a_fast_producer(threads):
    _, stream, sender = _make()
    count = 2000

    def produce() -> None:
        for i in range(count):
            sender.send(_out(i), final=False)
        sender.close()

    threads.start(produce)
    assert [_value(r) async for r in stream] == list(range(count))


async def test_await_stream_returns_last_response_from_a_producer_thread(threads):
    _, stream, sender = _make()
    go = threading.Event()

    def produce() -> None:
        assert go.wait(WAIT_S)
        sender.send(_out(1), final=False)
        sender.send(_out(2), final=True)

    threads.start(produce)
    awaiting = asyncio.ensure_future(asyncio.wait_for(stream, WAIT_S))
    await asyncio.sleep(0)  # let the task park on the stream (not a timing wait)
    go.set()
    response = await awaiting
    assert response is not None and _value(response) == 2


async def test_await_stream_raises_typed_error(threads):
    _, stream, sender = _make()
    threads.start(lambda: sender.send_error(InvalidArgumentError("nope")))
    with pytest.raises(InvalidArgumentError, match="nope"):
        await asyncio.wait_for(stream, WAIT_S)


async def test_async_iteration_yields_error_response_when_not_raise_on_error(threads):
    _, stream, sender = _make(raise_on_error=False)
    threads.start(lambda: sender.send_error(InternalError("x")))
    responses = [r async for r in stream]
    assert len(responses) == 1
    assert isinstance(responses[0].error, InternalError)


async def test_await_closed_stream_returns_none(threads):
    _, stream, sender = _make()
    threads.start(sender.close)
    assert await asyncio.wait_for(stream, WAIT_S) is None


async def test_cancelling_the_task_awaiting_the_stream_cancels_the_request():
    request, stream, sender = _make()
    task = asyncio.ensure_future(stream)
    await asyncio.sleep(0)  # the task parks on the stream's future
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert request.is_cancelled()
    # The backend then answers the cancelled request; that must not disturb anyone.
    sender.cancel_if_open()
    assert sender.closed


async def test_cancelling_the_task_iterating_the_stream_cancels_the_request():
    request, stream, sender = _make()
    started = asyncio.Event()

    async def consume() -> list[InferResponse]:
        seen = []
        async for response in stream:
            seen.append(response)
            started.set()
        return seen

    sender.send(_out(1), final=False)
    task = asyncio.ensure_future(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert request.is_cancelled()


async def test_wait_for_timeout_on_the_stream_cancels_the_request():
    request, stream, _ = _make()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(stream, 0.01)
    assert request.is_cancelled()


def test_backend_can_answer_after_the_awaiting_loop_is_gone():
    request, stream, sender = _make()

    async def await_then_give_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(stream, 0.01)

    asyncio.run(await_then_give_up())
    assert request.is_cancelled()
    sender.cancel_if_open()  # the backend thread answers the cancelled request


# -- sender rules ----------------------------------------------------------------------


def test_sending_after_final_raises_internal_error():
    _, _, sender = _make()
    sender.send(_out(1))
    assert sender.closed
    with pytest.raises(InternalError) as info:
        sender.send(_out(2))
    assert str(info.value) == (
        "response sender of request 'req-1' for model 'm' is closed: the final response was "
        "already sent"
    )
    with pytest.raises(InternalError):
        sender.send_error(InvalidArgumentError("late"))
    with pytest.raises(InternalError):
        sender.close()


def test_a_tracing_sender_refuses_a_send_after_final_as_any_sender_does():
    request = InferRequest("m", {}, id="req-1")
    captured: list[list[str]] = []

    class Capture:
        def capture_outputs(self, outputs) -> None:  # noqa: ANN001 - name -> Tensor
            captured.append(sorted(outputs))

    sender = TracingSender(Capture(), request, ResponseStream(request), "m", 1, None)
    sender.send(_out(1))
    with pytest.raises(InternalError, match="is closed"):
        sender.send(_out(2))
    assert captured == [["OUT"]]


def test_sending_after_close_raises_internal_error():
    _, _, sender = _make()
    sender.close()
    with pytest.raises(InternalError, match="is closed"):
        sender.send(_out(1))


def test_non_final_responses_keep_the_sender_open():
    _, stream, sender = _make()
    sender.send(_out(1), final=False)
    assert not sender.closed
    assert not stream.done


def test_close_ends_the_stream_without_a_response(threads):
    _, stream, sender = _make()
    threads.start(sender.close)
    assert stream.result(timeout=WAIT_S) is None
    assert stream.done
    assert list(stream) == []


def test_close_after_non_final_responses_keeps_them(threads):
    _, stream, sender = _make()

    def produce() -> None:
        sender.send(_out(1), final=False)
        sender.close()

    threads.start(produce)
    response = stream.result(timeout=WAIT_S)
    assert response is not None and _value(response) == 1 and not response.final


def test_sender_drops_outputs_the_request_did_not_ask_for():
    _, stream, sender = _make(requested_outputs=["B"])
    a = Tensor.from_object(np.array([1], dtype=np.int32))
    b = Tensor.from_object(np.array([2], dtype=np.int32))
    sender.send({"A": a, "B": b})
    response = stream.result()
    assert response is not None
    assert list(response.outputs) == ["B"]
    assert response.outputs["B"] is b


def test_sender_keeps_every_output_when_none_were_requested():
    _, stream, sender = _make()
    outputs = _out(1) | {"OTHER": Tensor.from_object(np.zeros(1, dtype=np.float32))}
    sender.send(outputs)
    response = stream.result()
    assert response is not None
    assert set(response.outputs) == {"OUT", "OTHER"}


def test_sender_with_empty_requested_outputs_drops_everything():
    _, stream, sender = _make(requested_outputs=[])
    sender.send(_out(1))
    response = stream.result()
    assert response is not None and response.outputs == {}


def test_sender_copies_outputs_and_parameters():
    _, stream, sender = _make()
    outputs = _out(1)
    parameters = {"p": 1}
    sender.send(outputs, parameters=parameters)
    outputs["LATE"] = outputs["OUT"]
    parameters["q"] = 2
    response = stream.result()
    assert response is not None
    assert list(response.outputs) == ["OUT"]
    assert response.parameters == {"p": 1}


def test_on_close_runs_once_on_final_response():
    calls: list[InferRequest] = []
    request, _, sender = _make(on_close=calls.append)
    sender.send(_out(1), final=False)
    sender.send(_out(2), final=False)
    assert calls == []
    sender.send(_out(3), final=True)
    assert calls == [request]
    with pytest.raises(InternalError):
        sender.send(_out(4))
    assert calls == [request]


def test_on_close_runs_once_on_close():
    calls: list[InferRequest] = []
    request, _, sender = _make(on_close=calls.append)
    sender.close()
    assert calls == [request]


def test_on_close_runs_after_the_response_is_delivered():
    seen_done: list[bool] = []
    request = InferRequest("m", {})
    stream = ResponseStream(request)
    sender = ResponseSender(
        request, stream, "m", 1, on_close=lambda r: seen_done.append(stream.done)
    )
    sender.send(_out(1))
    assert seen_done == [True]


# -- hold / release_held ---------------------------------------------------------------


def test_held_final_response_reaches_a_waiting_consumer_only_after_release(threads):
    calls: list[InferRequest] = []
    _, stream, sender = _make(on_close=calls.append)
    sender.hold()
    sender.send(_out(1), final=False)  # non-final responses are not held
    sender.send(_out(2), final=True)
    assert sender.closed
    assert not stream.done
    assert calls == []

    timed_out = threading.Event()
    got: list[InferResponse | None] = []

    def consume() -> None:
        with pytest.raises(TimeoutError):
            stream.result(timeout=0.05)
        timed_out.set()
        got.append(stream.result(timeout=WAIT_S))

    consumer = threads.start(consume)
    assert timed_out.wait(WAIT_S)
    assert got == []
    sender.release_held()
    consumer.join(WAIT_S)
    assert len(got) == 1 and got[0] is not None
    assert _value(got[0]) == 2 and got[0].final
    assert stream.done
    assert len(calls) == 1


def test_held_close_ends_the_stream_only_after_release():
    calls: list[InferRequest] = []
    _, stream, sender = _make(on_close=calls.append)
    sender.hold()
    sender.close()
    with pytest.raises(TimeoutError):
        stream.result(timeout=0.01)
    assert calls == []
    sender.release_held()
    assert stream.result(timeout=0) is None
    assert len(calls) == 1


def test_release_without_held_response_stops_holding():
    calls: list[InferRequest] = []
    _, stream, sender = _make(on_close=calls.append)
    sender.hold()
    sender.release_held()
    assert calls == []
    assert not stream.done
    sender.send(_out(1))
    assert stream.done
    assert len(calls) == 1


def test_release_held_twice_delivers_once():
    calls: list[InferRequest] = []
    _, stream, sender = _make(on_close=calls.append)
    sender.hold()
    sender.send(_out(1))
    sender.release_held()
    sender.release_held()
    assert [_value(r) for r in stream] == [1]
    assert len(calls) == 1


# -- cancellation ----------------------------------------------------------------------


def test_cancel_sets_request_flag_and_runs_hooks_once():
    request, stream, _ = _make()
    hook_calls = []
    request.on_cancel(lambda: hook_calls.append("a"))
    request.on_cancel(lambda: hook_calls.append("b"))
    assert not request.is_cancelled()
    stream.cancel()
    assert request.is_cancelled()
    assert hook_calls == ["a", "b"]
    stream.cancel()
    request.cancel()
    assert hook_calls == ["a", "b"]


def test_on_cancel_hook_added_after_cancel_runs_at_once():
    request, stream, _ = _make()
    stream.cancel()
    calls = []
    request.on_cancel(lambda: calls.append(1))
    assert calls == [1]


def test_cancel_from_another_thread_wakes_nothing_but_flags_request(threads):
    request, stream, sender = _make()
    threads.start(stream.cancel)
    threads.join()
    assert request.is_cancelled()
    assert not stream.done  # the backend still answers the request
    sender.cancel_if_open()
    with pytest.raises(CancelledError, match="request for model 'm' was cancelled"):
        stream.result(timeout=WAIT_S)


def test_cancel_after_the_final_response_does_not_flag_the_request():
    request, stream, sender = _make()
    sender.send(_out(1))
    stream.cancel()
    assert not request.is_cancelled()


def test_the_final_response_drops_the_cancel_hooks():
    # They hold whoever queued or ran the request, which holds the request: a cycle.
    for finish in ("send", "close", "release_held", "abort"):
        request, stream, sender = _make(raise_on_error=False)
        calls: list[str] = []
        request.on_cancel(lambda calls=calls: calls.append("hook"))
        if finish == "release_held":
            sender.hold()
            sender.send(_out(1))
            assert not stream.done
            sender.release_held()
        elif finish == "abort":
            sender.abort(CancelledError("gone"))
        else:
            getattr(sender, finish)()
        assert stream.done
        request.cancel()
        assert calls == [], finish


def test_a_backend_answering_after_an_abort_is_refused_cleanly():
    # An unload aborts a request a backend still holds; the backend's late answers meet
    # a closed sender (not the unlinked request), and nothing reaches the stream.
    for late in ("send", "close", "release_held"):
        _, stream, sender = _make(raise_on_error=False)
        if late == "release_held":
            sender.hold()
            sender.send(_out(1))  # held: the engine releases it after execute
        sender.abort(CancelledError("unloaded"))
        if late == "release_held":
            sender.release_held()
        else:
            with pytest.raises(InternalError, match="is closed"):
                getattr(sender, late)()
        responses = list(stream)
        assert len(responses) == 1 and isinstance(responses[0].error, CancelledError), late


def test_abort_after_the_final_response_changes_nothing():
    calls: list[InferRequest] = []
    request, stream, sender = _make(on_close=calls.append)
    sender.send(_out(1))
    sender.abort(CancelledError("unloaded"))
    assert calls == [request]
    assert [_value(r) for r in stream] == [1]
    assert not sender.failed


def test_cancel_if_open_answers_cancelled_error_once():
    _, stream, sender = _make(raise_on_error=False)
    sender.cancel_if_open()
    sender.cancel_if_open()
    responses = list(stream)
    assert len(responses) == 1
    assert isinstance(responses[0].error, CancelledError)
    assert sender.failed


def test_cancel_if_open_does_nothing_after_final():
    _, stream, sender = _make()
    sender.send(_out(1))
    sender.cancel_if_open()
    assert [_value(r) for r in stream] == [1]
    assert not sender.failed


# -- reprs -----------------------------------------------------------------------------


def test_infer_response_repr_has_no_tensor_data():
    tensor = Tensor.from_object(np.array([987654321], dtype=np.int64))
    response = InferResponse("add_sub", 1, "id", {"OUT": tensor})
    text = repr(response)
    assert text == "InferResponse(model='add_sub', version=1, final=True)"
    assert "987654321" not in text


def test_infer_response_repr_names_the_error_type():
    response = InferResponse("m", 2, error=InvalidArgumentError("secret detail"), final=False)
    text = repr(response)
    assert text == "InferResponse(model='m', version=2, final=False, error=InvalidArgumentError)"


def test_stream_repr_shows_model_and_state():
    _, stream, sender = _make()
    assert repr(stream) == "ResponseStream(model='m', done=False)"
    sender.close()
    assert repr(stream) == "ResponseStream(model='m', done=True)"


def test_stream_exposes_its_request():
    request, stream, _ = _make()
    assert stream.request is request


class _Runner:
    """An InlineRunner that records each attempt and answers the request when it may."""

    def __init__(self, runs: bool) -> None:
        self.runs = runs
        self.calls: list[bool] = []  # on_loop of each attempt

    def run_inline(self, request: InferRequest, *, on_loop: bool = False) -> bool:
        self.calls.append(on_loop)
        if self.runs:
            request.sender.send({}, final=True)  # type: ignore[union-attr]
        return self.runs


def test_a_blocking_reader_tries_its_runner_once_and_a_timed_one_never():
    request, stream, sender = _make(raise_on_error=False)
    runner = _Runner(runs=True)
    stream._runner = runner
    assert stream.result() is not None
    assert runner.calls == [False]

    request, stream, sender = _make(raise_on_error=False)
    runner = _Runner(runs=True)
    stream._runner = runner
    threading.Thread(target=lambda: sender.send({}, final=True)).start()
    assert stream.result(timeout=WAIT_S) is not None  # answered by the "instance thread"
    assert runner.calls == []


async def test_an_async_reader_asks_its_runner_for_a_loop_run_once():
    request, stream, sender = _make(raise_on_error=False)
    runner = _Runner(runs=False)  # cannot: the request stays with the instance thread
    stream._runner = runner
    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: sender.send({}, final=True))
    assert (await stream) is not None
    assert runner.calls == [True]


# -- a consumer that is neither a thread nor a task (the gRPC completion-queue thread) ----
def test_next_nowait_takes_what_has_arrived_without_waiting():
    _, stream, sender = _make(raise_on_error=False)
    assert stream.next_nowait() is None
    sender.send(_out(1), final=False)
    sender.send_error(InvalidArgumentError("bad"))
    assert _value(stream.next_nowait()) == 1
    assert isinstance(stream.next_nowait().error, InvalidArgumentError)  # returned, not raised
    assert stream.next_nowait() is None and stream.done


def test_when_ready_notifies_once_on_the_producers_thread():
    _, stream, sender = _make()
    seen: list[str] = []
    assert stream.when_ready(lambda: seen.append(threading.current_thread().name))
    producer = threading.Thread(target=lambda: sender.send(_out(7)), name="producer")
    producer.start()
    producer.join(WAIT_S)
    assert seen == ["producer"]
    assert _value(stream.next_nowait()) == 7
    assert not stream.when_ready(lambda: seen.append("again"))  # ended: nothing to wait for
    assert seen == ["producer"]


def test_when_ready_is_false_when_a_response_is_there_already():
    _, stream, sender = _make()
    sender.send(_out(2), final=False)
    assert not stream.when_ready(lambda: pytest.fail("must not be called"))
    assert _value(stream.next_nowait()) == 2
