"""start_eagerly: a handler runs at once on the loop thread, and only waits if it must."""

from __future__ import annotations

import asyncio

import pytest

from infercore.frontends.http_messages import HttpResponse
from infercore.frontends.http_protocol import start_eagerly

OK = HttpResponse(200)


async def test_a_handler_that_never_waits_is_answered_without_a_task():
    steps = []

    async def handler() -> HttpResponse:
        steps.append("ran")
        return OK

    tasks_before = len(asyncio.all_tasks())
    result = start_eagerly(handler())

    assert result is OK and steps == ["ran"]
    assert len(asyncio.all_tasks()) == tasks_before


async def test_a_handler_that_waits_is_finished_by_the_returned_coroutine():
    future = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        value = await future
        return HttpResponse(value)

    rest = start_eagerly(handler())
    assert not isinstance(rest, HttpResponse)
    task = asyncio.ensure_future(rest)
    future.set_result(201)

    assert (await task).status == 201


async def test_a_handler_sees_the_error_of_the_future_it_waited_on():
    future = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        try:
            await future
        except KeyError:
            return HttpResponse(500)
        return OK

    task = asyncio.ensure_future(start_eagerly(handler()))  # type: ignore[arg-type]
    future.set_exception(KeyError("boom"))

    assert (await task).status == 500


async def test_cancelling_the_task_cancels_the_handler_where_it_waits():
    future = asyncio.get_running_loop().create_future()
    seen = []

    async def handler() -> HttpResponse:
        try:
            await future
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return OK

    task = asyncio.ensure_future(start_eagerly(handler()))  # type: ignore[arg-type]
    await asyncio.sleep(0)  # let the task start waiting
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
    assert future.cancelled()


async def test_a_handler_may_wait_several_times_and_yield_to_the_loop():
    first = asyncio.get_running_loop().create_future()
    second = asyncio.get_running_loop().create_future()

    async def handler() -> HttpResponse:
        await first
        await asyncio.sleep(0)
        return HttpResponse(await second)

    task = asyncio.ensure_future(start_eagerly(handler()))  # type: ignore[arg-type]
    first.set_result(None)
    await asyncio.sleep(0)
    second.set_result(202)

    assert (await task).status == 202
