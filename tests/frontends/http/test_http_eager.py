"""http_eager: a handler runs at once on the loop thread, and waits without a Task."""

from __future__ import annotations

import asyncio
from typing import Any

from infercore.frontends.http.eager import Suspended, start_eagerly
from infercore.frontends.http.messages import HttpResponse

OK = HttpResponse(200)


class Outcome:
    """What ``Suspended.finish`` reported, and a future that resolves when it did."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, BaseException | None]] = []
        self.reported = asyncio.get_running_loop().create_future()

    def __call__(self, result: Any, error: BaseException | None) -> None:
        self.calls.append((result, error))
        if not self.reported.done():
            self.reported.set_result(None)


def _suspend(coro) -> Suspended[HttpResponse]:
    result = start_eagerly(coro)
    assert isinstance(result, Suspended)
    return result


async def test_a_handler_that_never_waits_is_answered_without_a_task():
    steps = []

    async def handler() -> HttpResponse:
        steps.append("ran")
        return OK

    tasks_before = len(asyncio.all_tasks())
    result = start_eagerly(handler())

    assert result is OK and steps == ["ran"]
    assert len(asyncio.all_tasks()) == tasks_before


async def test_a_handler_that_waits_is_finished_by_its_future_without_a_task():
    future = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        value = await future
        return HttpResponse(value)

    tasks_before = len(asyncio.all_tasks())
    outcome = Outcome()
    _suspend(handler()).finish(outcome)
    assert outcome.calls == [] and len(asyncio.all_tasks()) == tasks_before
    future.set_result(201)
    await outcome.reported

    [(response, error)] = outcome.calls
    assert error is None and response.status == 201


async def test_a_handler_sees_the_error_of_the_future_it_waited_on():
    future = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        try:
            await future
        except KeyError:
            return HttpResponse(500)
        return OK

    outcome = Outcome()
    _suspend(handler()).finish(outcome)
    future.set_exception(KeyError("boom"))
    await outcome.reported

    assert outcome.calls[0][0].status == 500


async def test_an_error_the_handler_raises_is_reported():
    future = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        await future
        raise ValueError("a bug")

    outcome = Outcome()
    _suspend(handler()).finish(outcome)
    future.set_result(None)
    await outcome.reported

    [(response, error)] = outcome.calls
    assert response is None and isinstance(error, ValueError)


async def test_cancelling_throws_into_the_handler_where_it_waits_at_once():
    future = asyncio.get_running_loop().create_future()
    seen = []

    async def handler() -> HttpResponse:
        try:
            await future
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return OK

    outcome = Outcome()
    suspended = _suspend(handler())
    suspended.finish(outcome)
    suspended.cancel()

    # at once: a connection aborted at shutdown cancels its request before the loop stops
    assert seen == ["cancelled"] and future.cancelled()
    [(response, error)] = outcome.calls
    assert response is None and isinstance(error, asyncio.CancelledError)
    suspended.cancel()  # ended: nothing more happens
    await asyncio.sleep(0)
    assert len(outcome.calls) == 1


async def test_a_handler_that_swallows_the_cancellation_is_closed():
    future = asyncio.get_running_loop().create_future()
    closed = []

    async def handler() -> HttpResponse:
        try:
            await future
        except asyncio.CancelledError:
            pass
        try:
            await asyncio.get_running_loop().create_future()  # waits again
        finally:
            closed.append(True)
        return OK

    outcome = Outcome()
    suspended = _suspend(handler())
    suspended.finish(outcome)
    suspended.cancel()

    assert closed == [True]
    assert isinstance(outcome.calls[0][1], asyncio.CancelledError)


async def test_a_handler_may_wait_several_times_and_yield_to_the_loop():
    first = asyncio.get_running_loop().create_future()
    second = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        await first
        await asyncio.sleep(0)
        return HttpResponse(await second)

    outcome = Outcome()
    _suspend(handler()).finish(outcome)
    first.set_result(None)
    for _ in range(3):
        await asyncio.sleep(0)
    second.set_result(202)
    await outcome.reported

    assert outcome.calls[0][0].status == 202


async def test_a_cancelled_bare_yield_does_not_step_again():
    steps = []

    async def handler() -> HttpResponse:
        await asyncio.sleep(0)
        steps.append("resumed")
        return OK

    outcome = Outcome()
    suspended = _suspend(handler())
    suspended.finish(outcome)
    suspended.cancel()
    for _ in range(3):
        await asyncio.sleep(0)

    assert steps == [] and len(outcome.calls) == 1
    assert isinstance(outcome.calls[0][1], asyncio.CancelledError)


async def test_yielding_something_other_than_a_future_is_an_error():
    class Odd:
        def __await__(self):
            yield "not a future"

    async def handler() -> HttpResponse:
        await Odd()
        return OK

    outcome = Outcome()
    _suspend(handler()).finish(outcome)

    [(response, error)] = outcome.calls
    assert response is None and isinstance(error, RuntimeError)
    assert "not a future" in str(error)


async def test_a_future_a_handler_waited_on_can_be_awaited_by_a_task_too():
    # Suspended leaves the future's "blocking" mark as ``await`` set it (only public
    # asyncio): a Task awaiting the same future, before and after, is not disturbed.
    future = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        return HttpResponse(await future)

    async def also_waits() -> int:
        return await future

    task = asyncio.ensure_future(also_waits())
    await asyncio.sleep(0)  # the Task waits on the future first
    outcome = Outcome()
    _suspend(handler()).finish(outcome)
    future.set_result(202)
    await outcome.reported
    assert outcome.calls[0][0].status == 202 and outcome.calls[0][1] is None
    assert await task == 202
    assert await also_waits() == 202  # and once done, awaited again at once


async def test_a_handler_that_yields_something_else_than_a_future_fails_clearly():
    class NotAFuture:
        def __await__(self):
            yield "nope"

    async def handler() -> HttpResponse:
        await NotAFuture()
        return OK

    outcome = Outcome()
    _suspend(handler()).finish(outcome)
    await outcome.reported
    result, error = outcome.calls[0]
    assert result is None and isinstance(error, RuntimeError)
    assert "yielded 'nope', not a future" in str(error)
