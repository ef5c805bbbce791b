"""The event loop an instance's ``async def execute`` runs on (backends/python/coroutines.py)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from infercore.backends.python.coroutines import CoroutineLoop


@pytest.fixture
def loop():
    made = CoroutineLoop("test-asyncio")
    yield made
    made.stop()


def test_run_returns_the_coroutine_result_and_raises_its_error(loop):
    async def answer():
        return 42

    async def fail():
        raise ValueError("boom")

    assert loop.run(answer()) == 42
    with pytest.raises(ValueError, match="boom"):
        loop.run(fail())


def test_tasks_a_coroutine_started_keep_running_after_it_returned(loop):
    done = threading.Event()

    async def later():
        await asyncio.sleep(0.01)
        done.set()

    async def start():
        asyncio.get_running_loop().create_task(later())

    loop.run(start())
    assert done.wait(5)


def test_a_background_coroutine_runs_while_the_caller_goes_on(loop):
    arrived = threading.Event()
    finished = threading.Event()

    async def wait_for_next():
        while not arrived.is_set():
            await asyncio.sleep(0.001)
        finished.set()

    loop.run_in_background(wait_for_next())
    arrived.set()  # the caller's next request, while the first coroutine still runs
    assert finished.wait(5)


def test_a_background_coroutine_error_is_logged(loop):
    logged = threading.Event()

    class Handler(logging.Handler):
        def emit(self, record):
            if "background failure" in record.getMessage():
                logged.set()

    handler = Handler()
    logging.getLogger("infercore.backends.python.coroutines").addHandler(handler)
    try:
        async def fail():
            raise RuntimeError("background failure")

        loop.run_in_background(fail())
        assert logged.wait(5)
    finally:
        logging.getLogger("infercore.backends.python.coroutines").removeHandler(handler)


def test_stop_cancels_what_still_runs_and_joins_the_thread():
    made = CoroutineLoop("test-asyncio-stop")
    started = threading.Event()
    cancelled = threading.Event()

    async def forever():
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    made.run_in_background(forever())
    assert started.wait(5)
    made.stop()
    assert cancelled.is_set()
    assert not any(t.name == "test-asyncio-stop" for t in threading.enumerate())
