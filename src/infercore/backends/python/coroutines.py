"""The event loop an instance's ``async def execute`` runs on, as in Triton's stub.

Triton's Python stub keeps one asyncio loop per instance, running on a thread of its own
between executions: a model that is not decoupled has its coroutine run there while
``execute`` waits for the result; a decoupled model's coroutine is left running there in
the background (the instance takes its next requests meanwhile), and an exception it ends
with is only logged. Tasks a coroutine starts (``asyncio.create_task``) go on running after
it returned, so they may still answer through response senders.

Threads: ``run``, ``run_in_background`` and ``stop`` are called on the instance's backend
thread; every coroutine runs on the loop's thread, a ``LoopThread`` (loop_thread.py, the
one owner of a loop on a thread) that this object starts at the first coroutine and stops
at finalize: what still runs then is cancelled, the loop's default executor (``async_exec``'s
threads) shut down, and the thread joined within ``STOP_TIMEOUT_S``. Each coroutine runs
in a copy of its caller's context, so the model's scope (BLS, logging) is seen there.
"""

from __future__ import annotations

import concurrent.futures
import logging
import traceback
from collections.abc import Coroutine
from typing import Any

from ...loop_thread import LoopThread

__all__ = ["CoroutineLoop"]

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0  # a coroutine blocking the loop thread must not hang an unload


class CoroutineLoop:
    """One instance's asyncio loop, on a thread named ``name`` (started here)."""

    def __init__(self, name: str) -> None:
        self._thread = LoopThread(name, owner=f"asyncio loop {name}").start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the loop and wait for its result (or its exception)."""
        return self._thread.call(coroutine)

    def run_in_background(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Start ``coroutine`` on the loop without waiting; an exception is logged (as the
        stub logs a decoupled model's)."""
        self._thread.submit(coroutine).add_done_callback(_log_failure)

    def stop(self) -> None:
        """Cancel the coroutines still running, stop the loop, join its thread."""
        self._thread.stop(timeout=STOP_TIMEOUT_S)


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        logger.error("%s", "".join(traceback.format_exception(error)))
