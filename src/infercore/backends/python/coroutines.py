"""The event loop an instance's ``async def execute`` runs on, as in Triton's stub.

Triton's Python stub keeps one asyncio loop per instance, running on a thread of its own
between executions: a model that is not decoupled has its coroutine run there while
``execute`` waits for the result; a decoupled model's coroutine is left running there in
the background (the instance takes its next requests meanwhile), and an exception it ends
with is only logged. Tasks a coroutine starts (``asyncio.create_task``) go on running after
it returned, so they may still answer through response senders.

Threads: ``run``, ``run_in_background`` and ``stop`` are called on the instance's backend
thread; every coroutine runs on the loop's thread, which this object starts (at the first
coroutine) and joins (``stop``, at finalize). Each coroutine runs in a copy of its caller's
context, so the model's scope (BLS, logging) is seen there. ``_lock`` guards the set of
background futures, which the loop thread's done callbacks shrink.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import traceback
from collections.abc import Coroutine
from typing import Any

__all__ = ["CoroutineLoop"]

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0  # a coroutine blocking the loop thread must not hang an unload


class CoroutineLoop:
    """One instance's asyncio loop, on a daemon thread started here and joined in ``stop``."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._background: set[concurrent.futures.Future[Any]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name,
                                         daemon=True)  # a stuck coroutine must not hang exit
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the loop and wait for its result (or its exception)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def run_in_background(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Start ``coroutine`` on the loop without waiting; an exception is logged."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        with self._lock:
            self._background.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._background.discard(future)
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            logger.error("%s", "".join(traceback.format_exception(error)))

    def stop(self) -> None:
        """Stop the loop (coroutines still running are cancelled), join it, close it."""
        loop = self._loop
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            logger.warning("thread %s did not stop within %.0f s; left running",
                           self._thread.name, STOP_TIMEOUT_S)
            return
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())  # async_exec's threads
        loop.close()
