"""loop_thread.LoopThread: the one owner of an event loop on a thread."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from infercore.errors import InternalError, UnavailableError
from infercore.loop_thread import LoopThread


def _alive(name: str) -> bool:
    return any(thread.name == name for thread in threading.enumerate())


def test_it_starts_names_runs_and_joins_its_thread():
    owner = LoopThread("test-loop-owner", owner="test owner")
    assert not owner.running and not _alive("test-loop-owner")
    owner.start()
    assert owner.running and _alive("test-loop-owner")

    async def where() -> str:
        return threading.current_thread().name

    assert owner.call(where()) == "test-loop-owner"
    assert owner.submit(where()).result(5) == "test-loop-owner"
    loop = owner.loop
    assert owner.stop(timeout=5) is True
    assert not _alive("test-loop-owner") and loop.is_closed()


def test_stop_runs_final_then_cancels_what_is_left_then_on_stop_before_the_loop_closes():
    order: list[str] = []
    seen: dict[str, bool] = {}

    def on_stop(loop: asyncio.AbstractEventLoop) -> None:
        seen["closed at on_stop"] = loop.is_closed()
        seen["on the loop thread"] = threading.current_thread().name == "test-loop-order"
        order.append("on_stop")

    owner = LoopThread("test-loop-order", on_stop=on_stop).start()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            order.append("cancelled")
            raise

    async def final() -> None:
        order.append("final")

    owner.submit(forever())
    assert started.wait(5)
    assert owner.stop(final(), timeout=10)
    assert order == ["final", "cancelled", "on_stop"]
    assert seen == {"closed at on_stop": False, "on the loop thread": True}


def test_a_stuck_loop_is_left_behind_after_the_deadline_and_stop_says_so():
    release = threading.Event()
    owner = LoopThread("test-loop-stuck").start()

    async def block() -> None:
        release.wait(30)  # blocks the loop's thread itself: nothing can cancel it

    owner.submit(block())
    time.sleep(0.05)
    began = time.monotonic()
    try:
        assert owner.stop(timeout=0.2) is False
        assert time.monotonic() - began < 5
        assert _alive("test-loop-stuck")
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while _alive("test-loop-stuck") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive("test-loop-stuck")


def test_blocking_on_or_stopping_from_its_own_loop_is_refused():
    owner = LoopThread("test-loop-self", owner="Thing").start()

    async def nested() -> list[str]:
        errors = []
        inner = asyncio.sleep(0)
        try:
            owner.call(inner)
        except InternalError as exc:
            errors.append(exc.message)
        try:
            owner.stop()
        except InternalError as exc:
            errors.append(exc.message)
        return errors

    try:
        errors = owner.call(nested())
    finally:
        owner.stop(timeout=5)
    assert errors[0].startswith("a blocking Thing call cannot run on its own event loop")
    assert errors[1].startswith("a Thing cannot be stopped from its own event loop")


def test_after_stop_nothing_more_runs_and_it_cannot_restart():
    owner = LoopThread("test-loop-after", owner="Thing").start()
    owner.stop(timeout=5)
    assert owner.stop(timeout=5) is True  # idempotent
    coroutine = asyncio.sleep(0)
    with pytest.raises(UnavailableError, match="the Thing is stopped"):
        owner.submit(coroutine)
    assert coroutine.cr_frame is None  # closed, never left un-awaited
    with pytest.raises(UnavailableError, match="the Thing is stopped"):
        owner.start()
    with pytest.raises(UnavailableError, match="event loop is not running"):
        owner.loop  # noqa: B018


def test_an_on_start_error_is_raised_by_start_and_leaves_no_thread():
    def on_start(_loop: asyncio.AbstractEventLoop) -> None:
        raise OSError("cannot attach")

    owner = LoopThread("test-loop-failed", on_start=on_start)
    with pytest.raises(OSError, match="cannot attach"):
        owner.start()
    assert not owner.running and not _alive("test-loop-failed")


def test_a_coroutine_runs_in_a_copy_of_the_callers_context():
    import contextvars

    scope: contextvars.ContextVar[str] = contextvars.ContextVar("scope", default="none")
    owner = LoopThread("test-loop-context").start()

    async def read() -> str:
        return scope.get()

    try:
        token = scope.set("the caller's")
        try:
            assert owner.call(read()) == "the caller's"
        finally:
            scope.reset(token)
        assert owner.call(read()) == "none"
    finally:
        owner.stop(timeout=5)
